"""The kinds of message the measuring process sends the relay process over the channel
(:class:`monitor.wyoming.channel.Uplink`), numpy-free: both processes import it."""

PROTECT = "protect"
"""A source's protection verdict (:class:`monitor.daemon.policy_feed.RelayFeed`): ``{"kind",
"protect": bool, "speaker": alias or null, "mode", "method", "alpha", "enabled"}``; the relay
process follows it (:mod:`monitor.protect.relay_process`)."""
