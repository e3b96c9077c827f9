"""``sparsewatch kafka up|down|status|fetch``: a local KRaft broker for machines without Docker."""

from __future__ import annotations

import re
from pathlib import Path

import click

from sparsewatch.cli_types import FiniteFloatRange, command_config, not_blank
from sparsewatch.errors import SparsewatchError
from sparsewatch.kafka_local import LocalKafka, fetch_broker_jars

# Kafka's port when a bootstrap address names none (librdkafka's default too)
_DEFAULT_PORT = 9092


def _first_port(bootstrap: str) -> int:
    """The port of the first address in ``kafka.bootstrap_servers`` (``host``, ``host:port``,
    ``[v6]:port``; Kafka's 9092 when it names none, as the clients read it)."""
    first = bootstrap.split(",")[0].strip()
    if ":" not in first or first.endswith("]"):
        return _DEFAULT_PORT
    text = first.rsplit(":", 1)[1]
    if not re.fullmatch(r"[0-9]{1,5}", text) or not 0 < int(text) <= 65535:
        raise SparsewatchError(
            f"kafka.bootstrap_servers (SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS) {bootstrap!r}: "
            f"{text!r} is not a port in 1..65535 (or give --port)"
        )
    return int(text)


def _broker(ctx: click.Context, port: int | None, run_dir: str | None) -> LocalKafka:
    config = command_config(ctx)
    if port is None:
        port = _first_port(config.kafka.bootstrap_servers)
    folder = Path(run_dir) if run_dir else config.data_path() / "kafka"
    _refuse_a_file_on_the_way(folder, "--run-dir" if run_dir else "data_dir")
    return LocalKafka(folder.resolve(), port=port)


def _refuse_a_file_on_the_way(folder: Path, what: str) -> None:
    """A one-line error when ``folder``, or the first of its parents that exists, is not a
    folder (a file there stopped ``kafka status`` and ``down`` with NotADirectoryError)."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise SparsewatchError(
            f"the broker's run folder {folder} ({what}) cannot be made: {existing} is not a folder"
        )


_port = click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Client port (default: from kafka.bootstrap_servers; 0 = any free port).",
)
_run_dir = click.option(
    "--run-dir",
    type=click.Path(file_okay=False),
    default=None,
    callback=not_blank,
    help="Folder for the broker's config, logs and data (default: DATA_DIR/kafka).",
)


@click.group()
def kafka() -> None:
    """Run a local single-node Kafka broker (KRaft) from Maven Central jars."""


@kafka.command()
@_port
@_run_dir
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=0, min_open=True),
    default=90.0,
    show_default=True,
    help="Seconds to wait for the broker to answer.",
)
@click.pass_context
def up(ctx: click.Context, port: int | None, run_dir: str | None, timeout: float) -> None:
    """Start the broker (downloading it on first use) and print its bootstrap address."""
    click.echo(_broker(ctx, port, run_dir).up(timeout=timeout))


@kafka.command()
@_port
@_run_dir
@click.pass_context
def down(ctx: click.Context, port: int | None, run_dir: str | None) -> None:
    """Stop the broker started from the run folder."""
    stopped = _broker(ctx, port, run_dir).down()
    click.echo("stopped" if stopped else "not running")


@kafka.command()
@_port
@_run_dir
@click.pass_context
def status(ctx: click.Context, port: int | None, run_dir: str | None) -> None:
    """Report whether the broker runs (exit status 1 when it does not)."""
    state = _broker(ctx, port, run_dir).status()
    if state.running:
        click.echo(f"running pid={state.pid} bootstrap={state.bootstrap} run_dir={state.run_dir}")
    else:
        click.echo(f"not running (run_dir={state.run_dir})")
        ctx.exit(1)


@kafka.command()
def fetch() -> None:
    """Only download the broker's jars into the cache (for offline use later)."""
    click.echo(str(fetch_broker_jars()))
