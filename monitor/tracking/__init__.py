"""Who is speaking: the tracker, turn changes, profile adaptation, window consistency, and the
narrow-band and far-field variants of the enrolled profiles."""
