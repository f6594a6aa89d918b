"""Assembles the typer app from one module per command group, and maps errors to exit codes."""

from __future__ import annotations

import typer

from rmqinspect import __version__

app = typer.Typer(
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
