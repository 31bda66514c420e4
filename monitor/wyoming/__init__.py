"""The Wyoming protocol: its wire, the table of audio formats accepted from peers, the listener
and proxy sources, the relay's connections, the channel between the relay and measuring
processes (and its message schema), and zeroconf announcements."""
