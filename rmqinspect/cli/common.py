"""What every command shares: exit codes and the mapping of bad input to one stderr line."""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import ParamSpec, TextIO, TypeVar

import typer

from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.render.output import warn
from rmqinspect.render.values import printable
from rmqinspect.store import mapguard

EXIT_OK = 0
EXIT_FINDINGS = 1  # like grep: nothing found, or findings that fail a CI gate
EXIT_BAD_INPUT = 2  # usage error or unreadable input
DEBUG_VARIABLE = "RMQINSPECT_DEBUG"

P = ParamSpec("P")
R = TypeVar("R")


def fail(message: str) -> typer.Exit:
    """Print one error line to stderr (control characters escaped, so it stays one line) and
    return the exit to raise."""
    print(f"rmqinspect: error: {printable(message)}", file=sys.stderr)
    return typer.Exit(EXIT_BAD_INPUT)


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Every command's error handling: bad input (:class:`StoreError`, :class:`DecodeError`,
    ``OSError``) becomes one line on stderr and exit 2; any other exception too, as a line that
    names the command and the error (it is a bug: ``RMQINSPECT_DEBUG=1`` re-raises every error
    with its traceback instead). A store file that shrank while the command read it is such an
    error whatever the command made of the bytes (:func:`mapguard.checked`). Warnings are
    printed as one line each."""
    command = func.__name__.removesuffix("_command").replace("_", "-")
    run = mapguard.checked(func)

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        debug = os.environ.get(DEBUG_VARIABLE) == "1"
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = _show_warning
            try:
                return run(*args, **kwargs)
            except BrokenPipeError:
                # The reader went away (``| head``): stop quietly, like other Unix tools.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise typer.Exit(EXIT_OK) from None
            except (typer.Exit, typer.Abort, typer.TyperException):
                raise
            except (StoreError, DecodeError, OSError) as err:
                if debug:
                    raise
                raise fail(_describe(err)) from None
            except Exception as err:  # MemoryError included
                if debug:
                    raise
                raise fail(
                    f"{command}: unexpected {type(err).__name__}: {err} (a bug in rmqinspect; "
                    f"{DEBUG_VARIABLE}=1 shows the traceback)"
                ) from None

    return wrapper


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    warn(str(message))


def _describe(err: Exception) -> str:
    if isinstance(err, DecodeError) and err.offset is not None:
        return f"byte {err.offset}: {err.message}"
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.filename}: {err.strerror}"
    return str(err)
