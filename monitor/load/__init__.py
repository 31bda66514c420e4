"""A guest that fits its host: load shedding and the measuring side's CPU priority."""
