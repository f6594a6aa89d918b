"""Assembles the typer app from one module per command group, and maps errors to exit codes."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

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


app = typer.Typer(
    cls=_OneLineErrors,
    name="rmqinspect",
    help="Offline forensic inspector for Apache RocketMQ broker store directories.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


def _register_commands() -> None:
    # Imported here so that each command module can import ``app`` helpers without a cycle.
    from rmqinspect.cli import (
        checkpoint,
        consumequeue,
        decode_id,
        export,
        index,
        info,
        lookup,
        messages,
        offsets,
        recover,
        salvage,
        synth,
        verify,
    )

    for module in (
        info,
        messages,
        consumequeue,
        index,
        checkpoint,
        offsets,
        lookup,
        decode_id,
        recover,
        export,
        verify,
        salvage,
        synth,
    ):
        module.register(app)


_register_commands()


def main() -> None:
    """Console entry point (``rmqinspect`` and ``python -m rmqinspect``)."""
    app()
