"""What a worker process keeps open for one run of an engine (an export, a verify): opened on
first use, shared by the run's tasks in that process, and closed when a task of another run
arrives. A process that outlives a run (a Spark session's Python workers) reopens: the store
may have changed since."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RunCache(Generic[K, V]):
    def __init__(self, close: Callable[[V], None]) -> None:
        self.close = close
        self.run = ""
        self.values: dict[K, V] = {}

    def get(self, run: str, key: K, open_: Callable[[], V]) -> V:
        """The value for ``key`` in ``run``, opened by ``open_`` the first time."""
        if run != self.run:
            for value in self.values.values():
                self.close(value)
            self.values.clear()
            self.run = run
        if key not in self.values:
            self.values[key] = open_()
        return self.values[key]
