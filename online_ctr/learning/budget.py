"""One memory budget shared by many in-memory tables, each of which can start again empty.

The API keeps tables per model (feature names by id, a copy of hot features' state); each is
bounded on its own, but a service of a hundred models would multiply every bound by a hundred.
A :class:`Budget` bounds their sum instead: after a table grows, :meth:`Budget.fit` empties the
largest tables until the sum is back under the limit. The largest first, because the table that
grew past everyone else's (a client sending endless new names to one model) is the one to pay,
not the models whose tables are small and warm. Emptying is always safe for these tables: they
remember what can be read or computed again, so a forgotten entry costs time, never a wrong
answer.

>>> class Table:
...     def __init__(self, held: int) -> None:
...         self.size = held
...     def held(self) -> int:
...         return self.size
...     def forget(self) -> None:
...         self.size = 0
>>> budget = Budget(100)
>>> small, large = budget.track(Table(30)), budget.track(Table(60))
>>> budget.fit(), budget.held()
(0, 90)
>>> large.size = 90
>>> budget.fit(), small.size, large.size, budget.forgotten
(1, 30, 0, 1)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Protocol, TypeVar


class Forgetful(Protocol):
    """A table the budget can measure and empty."""

    def held(self) -> int:
        """What it holds now, in the budget's unit (bytes, or entries)."""
        ...  # pragma: no cover

    def forget(self) -> None:
        """Start again, empty."""
        ...  # pragma: no cover


Table = TypeVar("Table", bound=Forgetful)


class Budget:
    """At most ``limit`` units held by every tracked table together.

    Tables are tracked weakly: a table dropped with its model (a deleted model) leaves the sum
    without being told to. Not thread-safe; the API calls it from its one event loop.
    """

    def __init__(self, limit: int, on_forget: Callable[[], object] | None = None) -> None:
        """``on_forget`` is called each time a table is emptied (a metric's ``inc``)."""
        if limit < 1:
            raise ValueError(f"a budget's limit must be at least 1, got {limit}")
        self.limit = limit
        self._on_forget = on_forget
        #: Tables emptied to stay within the limit, since the budget was made.
        self.forgotten = 0
        # By id, as tables need not be hashable (a dataclass with eq is not); an entry leaves
        # with its table (the reference's callback), so an id reused later is never confused
        # with it. Plain references, not a WeakValueDictionary: its iteration made a fit of two
        # tables 8.9 us against 3.1, and a /predict that reads new features makes two fits.
        self._tables: dict[int, weakref.ref[Forgetful]] = {}

    def track(self, table: Table) -> Table:
        """Count ``table`` in the budget from now on; returns it."""
        key = id(table)
        self._tables[key] = weakref.ref(table, lambda _: self._tables.pop(key, None))
        return table

    def _live(self) -> list[Forgetful]:
        # A copy first: a table collected meanwhile takes its entry out of the dict.
        tables = (ref() for ref in list(self._tables.values()))
        return [table for table in tables if table is not None]

    def held(self) -> int:
        """What every tracked table holds, together."""
        return sum(table.held() for table in self._live())

    def fit(self) -> int:
        """Empty the largest tables until the sum is within the limit; how many were emptied.

        Called by a table after it grew: its cost is one ``held()`` per tracked table."""
        tables = self._live()
        total = 0
        for table in tables:
            total += table.held()
        if total <= self.limit:  # the usual case, on /predict's path: no sort
            return 0
        sizes = [(table.held(), index, table) for index, table in enumerate(tables)]
        sizes.sort()
        emptied = 0
        while total > self.limit and sizes:
            size, _, table = sizes.pop()
            table.forget()
            total -= size
            emptied += 1
            if self._on_forget is not None:
                self._on_forget()
        self.forgotten += emptied
        return emptied
