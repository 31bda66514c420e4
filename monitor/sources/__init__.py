"""Audio sources by name: the one parser of source specs, and several sources read as one."""
