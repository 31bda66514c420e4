"""Score files and the `score`/`compose` report."""
