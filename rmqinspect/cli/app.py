"""Assembles the typer app from one module per command, each imported when its command runs."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import ItemsView, Iterator, KeysView, Sequence, ValuesView
from typing import TYPE_CHECKING, Any

import typer
import typer.main
from typer.core import TyperGroup

if TYPE_CHECKING:
    from typer import _click as click

from rmqinspect import __version__
from rmqinspect.render.values import printable


class _OneLineErrors(TyperGroup):
    """Usage errors as one stderr line naming the command, like every other error (typer would
    draw a usage box): scripts and on-call people read one line, and the help is one flag away."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        def run() -> Any:
            return super(_OneLineErrors, self).main(
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )

        if not standalone_mode:
            return run()
        try:
            result = run()
        except typer.Abort:
            print("Aborted!", file=sys.stderr)
            sys.exit(1)
        except typer.TyperException as err:  # click's ClickException and UsageError
            if type(err).__name__ != "NoArgsIsHelpError":  # the help is already printed
                ctx = getattr(err, "ctx", None)
                command = getattr(ctx, "command_path", None) or "rmqinspect"
                hint = f" (see '{command} --help')" if ctx is not None else ""
                message = err.format_message()
                print(f"rmqinspect: error: {printable(message)}{hint}", file=sys.stderr)
            sys.exit(getattr(err, "exit_code", 2))
        # Without standalone mode a command's typer.Exit comes back as its exit code.
        sys.exit(result if isinstance(result, int) else 0)


# Each command's module, imported only when the command runs (or help lists it): a command
# pays for the libraries it uses (numpy, pyarrow, rich) and no other's.
_COMMANDS = {
    "info": "info",
    "messages": "messages",
    "consumequeue": "consumequeue",
    "index": "index",
    "checkpoint": "checkpoint",
    "offsets": "offsets",
    "groups": "groups",
    "delays": "delays",
    "lookup": "lookup",
    "decode-id": "decode_id",
    "recover": "recover",
    "export": "export",
    "verify": "verify",
    "salvage": "salvage",
    "synth": "synth",
    "transactions": "transactions",
    "trace": "trace",
    "timers": "timers",
    "pop": "pop",
    "stats": "stats",
    "report": "report",
}


class _Commands(dict[str, "click.Command"]):
    """The commands by name, each module imported and converted on first use; looking at them
    all (help, iteration) loads them all."""

    def __missing__(self, name: str) -> click.Command:
        if name not in _COMMANDS:
            raise KeyError(name)
        module = importlib.import_module(f"rmqinspect.cli.{_COMMANDS[name]}")
        one = typer.Typer()
        module.register(one)
        command = typer.main.get_command(one)
        self[name] = command
        return command

    def _all(self) -> dict[str, click.Command]:
        return {name: self[name] for name in _COMMANDS}

    def __contains__(self, name: object) -> bool:
        return name in _COMMANDS or dict.__contains__(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def keys(self) -> KeysView[str]:  # type: ignore[override]
        return self._all().keys()

    def values(self) -> ValuesView[click.Command]:  # type: ignore[override]
        return self._all().values()

    def items(self) -> ItemsView[str, click.Command]:  # type: ignore[override]
        return self._all().items()


class _LazyGroup(_OneLineErrors):
    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands(self.commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands[cmd_name] if cmd_name in _COMMANDS else None


app = typer.Typer(
    name="rmqinspect",
    help="Offline forensic inspector for Apache RocketMQ broker store directories.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_LazyGroup,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rmqinspect {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Inspect a RocketMQ store/ directory without a broker; never writes into it."""


def main() -> None:
    """Console entry point (``rmqinspect`` and ``python -m rmqinspect``)."""
    # numpy's OpenBLAS starts a thread per core at import, which spins for a while: 0.1 s of
    # CPU on every command that imports numpy, for linear algebra rmqinspect never does.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    app()
