"""Scoring a window against the N templates, the evidence it yields, and the received view."""
