"""One SQLite file (WAL, mode 0600) for templates, calibrations, ledger, budgets, alerts and
the rooms sources have learnt.

``open_store(path)`` returns a :class:`Store`; see ``docs/architecture.md`` for the API.
"""

from monitor.store.calibrations import CalibrationRecord
from monitor.store.database import MIGRATIONS, SCHEMA_VERSION, Store, open_store
from monitor.store.ledger import TrackPeriod, WindowRecord
from monitor.store.outbox import BudgetRecord, OutboxMessage
from monitor.store.rooms import SourceRoom
from monitor.store.templates import (
    Enrolment,
    Identity,
    LocalProfile,
    TemplateInfo,
)

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "BudgetRecord",
    "CalibrationRecord",
    "Enrolment",
    "Identity",
    "LocalProfile",
    "OutboxMessage",
    "SourceRoom",
    "Store",
    "TemplateInfo",
    "TrackPeriod",
    "WindowRecord",
    "open_store",
]
