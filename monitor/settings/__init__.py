"""The daemon's settings: one frozen dataclass per section, their checks, the loader."""
