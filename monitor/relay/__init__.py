"""The relay process (``voxmeter relay``): Wyoming relayed byte for byte, protection applied in it.

Nothing here imports numpy unless ``[protect]`` is on: the relay must stay small."""
