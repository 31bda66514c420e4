"""voxmeter: how much speech discloses about who is speaking, in bits."""

__version__ = "0.1.0"
