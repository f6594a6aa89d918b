"""A fleet export: several stores in one dataset, each under ``broker=NAME`` in every table.

``NAME=STORE`` names a store; an unnamed store of a fleet is named by the store host address
its newest records hold (the broker's ``brokerIP1:listenPort``, as ``offset_msg_id`` encodes
it), which tells brokers of one cluster apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rmqinspect.export.tasks import Member
from rmqinspect.store.model import Store


def split_pair(text: str) -> tuple[str | None, Path]:
    """``NAME=STORE`` as (NAME, STORE), a plain STORE as (None, STORE). A directory whose own
    name holds ``=`` stays a directory: the name is the text before the first ``=`` and holds
    no path separator, and the whole text names nothing on disk."""
    name, sep, rest = text.partition("=")
    if sep and name and rest and "/" not in name and not Path(text).exists():
        return name, Path(rest)
    return None, Path(text)


def store_host(store: Store) -> str | None:
    """The store host of the first record of the newest commitlog file that starts with one
    (a broker's address can change; its newest records say what it is now)."""
    options = store.check_options(check_crc=False, read_body=False)
    for f in reversed(store.commitlog.files):
        records = store.first_records(f, options)
        if records:
            return str(records[0].store_host)
    return None


def fleet_members(stores: Sequence[tuple[str | None, Store]]) -> list[Member]:
    """The export's stores: one unnamed store as itself; otherwise each named (by its pair, or
    :func:`store_host`), the names distinct. Raises ValueError saying which store lacks a name
    or which name repeats."""
    if len(stores) == 1 and stores[0][0] is None:
        return [Member(stores[0][1])]
    members: list[Member] = []
    seen: dict[str, Path] = {}
    for name, store in stores:
        broker = name if name is not None else store_host(store)
        if broker is None:
            raise ValueError(
                f"{store.root} holds no record to name its broker by: give NAME={store.root}"
            )
        if broker in seen:
            raise ValueError(
                f"{store.root} and {seen[broker]} are both broker {broker!r}: name them, NAME=STORE"
            )
        seen[broker] = store.root
        members.append(Member(store, broker))
    return members
