"""Domain errors. Every bad-input error carries where it happened, so the CLI can print one line."""

from __future__ import annotations


class DecodeError(ValueError):
    """Raised by the pure decoders in :mod:`rmqinspect.format`; ``offset`` is relative to the
    buffer they were given (the store layer adds the file name and absolute offset)."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


class StoreError(Exception):
    """Bad or unreadable input found while reading a store: names the file and byte offset."""

    def __init__(self, message: str, path: str | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.offset = offset

    def __str__(self) -> str:
        where = []
        if self.path is not None:
            where.append(self.path)
        if self.offset is not None:
            where.append(f"byte {self.offset}")
        prefix = ", ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message

    @classmethod
    def from_decode(cls, err: DecodeError, path: str, base_offset: int = 0) -> StoreError:
        offset = None if err.offset is None else base_offset + err.offset
        return cls(err.message, path, offset)


class LiveStoreWarning(UserWarning):
    """The store was being written while it was read (a broker still running on it)."""
