"""voxmeter: how much speech discloses about who is speaking, in bits."""

__version__ = "0.8.0"  # the last release in CHANGELOG.md (pyproject.toml reads it from here)
