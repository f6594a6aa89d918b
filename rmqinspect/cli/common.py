"""What every command shares: exit codes and the mapping of bad input to one stderr line."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer

from rmqinspect.errors import DecodeError, StoreError

EXIT_OK = 0
EXIT_FINDINGS = 1  # like grep: nothing found, or findings that fail a CI gate
EXIT_BAD_INPUT = 2  # usage error or unreadable input

P = ParamSpec("P")
R = TypeVar("R")


def fail(message: str) -> typer.Exit:
    """Print one error line to stderr and return the exit to raise."""
    print(f"rmqinspect: error: {message}", file=sys.stderr)
    return typer.Exit(EXIT_BAD_INPUT)


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn bad input into one line on stderr and exit code 2; ``RMQINSPECT_DEBUG=1`` re-raises."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except BrokenPipeError:
            # The reader went away (``| head``): stop quietly, like other Unix tools.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(EXIT_OK) from None
        except (StoreError, DecodeError, OSError) as err:
            if os.environ.get("RMQINSPECT_DEBUG") == "1":
                raise
            raise fail(_describe(err)) from None

    return wrapper


def _describe(err: Exception) -> str:
    if isinstance(err, DecodeError) and err.offset is not None:
        return f"byte {err.offset}: {err.message}"
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.filename}: {err.strerror}"
    return str(err)
