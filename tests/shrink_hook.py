"""``python -m tests.shrink_hook [--unguarded] FILE ARGS...``: run ``rmqinspect ARGS`` in this
process with ``FILE`` truncated to nothing right after rmqinspect maps it, as a copy in progress
or a second process would leave it while it is read: reading the map past the new end faults
(SIGBUS). ``--unguarded``: as where the ``_mapguard`` extension is not built."""

from __future__ import annotations

import mmap
import os
import sys
from typing import Any


def main() -> None:
    args = sys.argv[1:]
    if args[0] == "--unguarded":
        sys.modules["rmqinspect.store._mapguard"] = None  # type: ignore[assignment]
        args = args[1:]
    path = args[0]
    target = os.stat(path)
    real = mmap.mmap

    def mapping(fileno: int, length: int, *args: Any, **kwargs: Any) -> mmap.mmap:
        m = real(fileno, length, *args, **kwargs)
        if fileno >= 0 and os.path.samestat(os.fstat(fileno), target):
            os.truncate(path, 0)
        return m

    mmap.mmap = mapping  # type: ignore[misc, assignment]
    sys.argv = ["rmqinspect", *args[1:]]
    from rmqinspect.cli.app import main as rmqinspect

    rmqinspect()


if __name__ == "__main__":
    main()
