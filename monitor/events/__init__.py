"""What the daemon's stages say to each other and to the exporters: messages, figures."""
