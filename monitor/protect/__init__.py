"""Protection of what the assistant receives: the McAdams anonymiser (pure signal code) and
the policy deciding which utterances it processes."""

METHODS = ("mcadams",)
"""Anonymisation methods ``[protect] method`` and ``evaluate --protect`` accept."""

MODES = ("off", "exceeded", "always")
"""``[protect] mode`` (:mod:`monitor.protect.policy`); here, numpy-free, for the relay process."""
