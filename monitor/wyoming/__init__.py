"""The Wyoming protocol: its wire, the listener and proxy sources, the relay's connections, the
channel between the relay and measuring processes, and zeroconf announcements."""
