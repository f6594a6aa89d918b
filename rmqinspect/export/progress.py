"""Progress of an export, reported to whoever shows it (the CLI's bar, or nobody)."""

from __future__ import annotations

from collections.abc import Sequence

from rmqinspect.export.plan import Part


class Reporter:
    """Progress callbacks; this base reports nothing."""

    def planned(self, total_bytes: int, total_files: int) -> None:
        """The arrow engine's parts: this many bytes and files to go."""

    def advanced(self, nbytes: int, files: int) -> None:
        """The arrow engine finished parts worth ``nbytes`` completing ``files`` files."""

    def tasks(self, job: str, done: int, total: int) -> None:
        """The spark engine's ``job``: ``done`` of its ``total`` tasks (one task a part; Spark
        does not say which part is done until the job ends)."""


class FileTally:
    """A file (a part's ``source``) is done when the last part reading it is."""

    def __init__(self, parts: Sequence[Part]) -> None:
        self._left: dict[str, int] = {}
        for p in parts:
            if p.source:
                self._left[p.source] = self._left.get(p.source, 0) + 1
        self.files = len(self._left)
        self.nbytes = sum(p.nbytes for p in parts)

    def expect(self, source: str, parts: int) -> None:
        """``source`` is read by ``parts`` parts (at least one), not as many as planned (a
        commitlog file planned in chunks from its length turned out to hold fewer ranges)."""
        self._left[source] = parts

    def finished(self, part: Part) -> int:
        """Files completed by ``part`` (0 or 1)."""
        if not part.source:
            return 0
        self._left[part.source] -= 1
        return int(self._left[part.source] == 0)
