"""The ``[population]`` settings: the reference population a figure is measured against."""

from __future__ import annotations

from dataclasses import dataclass

from monitor.settings.checks import setting


@dataclass(frozen=True)
class PopulationSettings:
    """Who a voice is told apart from: the shipped reference population (train speakers of
    speechocean762, templates only) joins the database's templates unless switched off."""

    shipped: bool = setting(
        True,
        "score against the reference population shipped with voxmeter as well as the "
        "database's templates (the household and any reference speakers enrolled); false = "
        "the database's templates alone",
    )
