"""The budgets of the API's in-memory tables, one of each per process, across all models.

Every served model keeps tables that fill with traffic: its hasher's cache and two name tables
(:class:`~service.api.scan.NameIds`), counted in bytes against ``OCTR_NAME_TABLE_BYTES``, and
its copy of hot features' state (:mod:`online_ctr.store.replica`), counted in features against
``OCTR_PREDICT_CACHE_FEATURES``. Each limit holds for all models together, so a service of many
models needs no more memory than one; past a limit the largest table starts again empty
(:mod:`online_ctr.learning.budget`), which costs time on its next requests, never a wrong answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from online_ctr.config.settings import Settings
from online_ctr.learning.budget import Budget
from online_ctr.metrics import Metrics


@dataclass(frozen=True)
class TableBudgets:
    """The name tables' budget (bytes) and the predict copies' (features; None: no copies)."""

    names: Budget
    copies: Budget | None

    @classmethod
    def of(cls, settings: Settings, metrics: Metrics) -> TableBudgets:
        names = Budget(settings.name_table_bytes, metrics.name_table_resets.inc)
        copies = settings.predict_cache_features
        return cls(names, Budget(copies) if copies else None)

    def export(self, metrics: Metrics) -> None:
        """Set the gauges of what the tables hold (before /metrics renders)."""
        metrics.name_table_bytes.set(self.names.held())
        metrics.predict_copy_features.set(self.copies.held() if self.copies else 0)
