"""Command line interface: ``sparsewatch <command>``.

Every command reports problems caused by its input or environment as one line on stderr and a
non-zero exit status; ``--debug`` (or ``SPARSEWATCH_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import MutableMapping
from types import FrameType
from typing import Any

import click

from sparsewatch.errors import SparsewatchError, first_line

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class EarlySignals:
    """SIGTERM and SIGINT from the program's first instruction (:func:`main`) until the command
    takes them over, recorded in :attr:`received` rather than obeyed.

    Importing a command's modules takes about half a second (SQLAlchemy, confluent-kafka, NumPy,
    ...), and ``sparsewatch run`` set its stop handlers only after that: a SIGTERM meanwhile (an
    orchestrator stopping a worker it just started) killed it by Python's default (exit status
    143, nothing said), a Ctrl-C printed a KeyboardInterrupt traceback. ``run`` reads what was
    received and stops cleanly (:func:`sparsewatch.runner.run_workers`); every other command gets
    the default handlers back before it runs (:meth:`release`), a signal received meanwhile then
    delivered as it would have been."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)

    def install(self) -> None:
        """Record the stop signals from now on (in the main thread only: elsewhere no handler
        can be set, and the process's own are left alone)."""
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self) for sig in _STOP_SIGNALS}

    def restore(self) -> None:
        """The previous handlers back where these are still in place (not where the command
        installed its own)."""
        for sig, handler in self._previous.items():
            if signal.getsignal(sig) is self:  # None: not set from Python, the default then
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        self._previous = {}

    def release(self) -> None:
        """The previous handlers back, and the first signal received meanwhile delivered to them:
        SIGTERM ends the process as it would have, Ctrl-C interrupts the command (``aborted``)."""
        self.restore()
        if self.received:
            signal.raise_signal(self.received.pop(0))


def _not_blank(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """:func:`sparsewatch.cli_types.not_blank`, imported when called (it imports the
    configuration's module)."""
    from sparsewatch.cli_types import not_blank

    return not_blank(ctx, param, value)


class _Commands(click.Group):
    """The ``sparsewatch`` group, its commands imported when first looked up (:func:`_register`):
    their modules take half a second to import, which :func:`main` spends with its signal
    handlers (:class:`EarlySignals`) in place."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._registered = False
        super().__init__(*args, **kwargs)

    @property
    def commands(self) -> MutableMapping[str, click.Command]:
        if not self._registered:
            self._registered = True
            _register(self)
        return self._commands

    @commands.setter
    def commands(self, value: MutableMapping[str, click.Command]) -> None:
        self._commands = value

    def invoke(self, ctx: click.Context) -> Any:
        """The command; a reader gone (``| head``: a closed pipe) ends it quietly, status 0, as
        it ends a JSON or CSV listing (click's own exit for it, status 1, left tables and
        ``status --format json`` failing a ``pipefail`` script)."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            from sparsewatch.query_output import reader_gone  # (rich: not at every start)

            reader_gone()
            return 0


@click.group(cls=_Commands)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="SPARSEWATCH_CONFIG",
    callback=_not_blank,  # ("" meant no file, or SPARSEWATCH_CONFIG's over the command line)
    help="TOML configuration file.",
)
@click.option("--debug", is_flag=True, envvar="SPARSEWATCH_DEBUG", help="Show tracebacks.")
@click.version_option(package_name="sparsewatch")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, debug: bool) -> None:
    """sparsewatch: novel documents, emerging topics and anomalies in document streams."""
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path
    ctx.obj["debug"] = debug
    early = ctx.obj.get("early_signals")
    if isinstance(early, EarlySignals) and ctx.invoked_subcommand != "run":
        early.release()  # (``run`` takes over what it recorded: sparsewatch.runner)


def _register(group: click.Group) -> None:
    from sparsewatch.commands_db import db
    from sparsewatch.commands_dead_letters import dead_letters
    from sparsewatch.commands_evaluate import evaluate
    from sparsewatch.commands_ingest import ingest
    from sparsewatch.commands_kafka import kafka
    from sparsewatch.commands_query import alerts, documents, snapshots, topics
    from sparsewatch.commands_replay import replay
    from sparsewatch.commands_run import demo, run
    from sparsewatch.commands_status import status

    for command in (kafka, alerts, documents, topics, dead_letters, status, snapshots, db):
        group.add_command(command)
    for command in (replay, ingest, run, demo, evaluate):
        group.add_command(command)


# What click's ``--debug`` flag reads as true in ``SPARSEWATCH_DEBUG`` (its BOOL type);
# "false", "no" or "off" showed tracebacks, since only "" and "0" counted as off.
_TRUE = ("1", "true", "t", "yes", "y", "on")


def _one_line(message: str) -> str:
    """click's ``message`` on one line (a missing choice argument listed its choices one per
    line: "Choose from:\n\tdetector,\n\tanomaly,\n\tall")."""
    return " ".join(message.split())


def main() -> None:
    """Console entry point: run the click group, turning errors into one-line messages; SIGTERM
    and SIGINT are recorded from here on until the command takes them over
    (:class:`EarlySignals`)."""
    early = EarlySignals()
    early.install()
    try:
        _main(early)
    finally:
        early.restore()


def _main(early: EarlySignals) -> None:
    debug = (
        os.environ.get("SPARSEWATCH_DEBUG", "").strip().lower() in _TRUE or "--debug" in sys.argv
    )
    try:
        result = cli.main(standalone_mode=False, obj={"early_signals": early})
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:  # ``sparsewatch``, ``sparsewatch db``, ...
        exc.show()  # the command's help, as click prints it (it read "error: Usage: ...")
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        if isinstance(exc, click.NoSuchOption) and exc.option_name in ("--config", "--debug"):
            hint = (
                f" ({exc.option_name} goes before the command: sparsewatch {exc.option_name} ...)"
            )
        click.echo(f"error: {_one_line(exc.format_message())}{hint}", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"error: {_one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code)
    except SparsewatchError as exc:
        if debug:
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except Exception as exc:
        if debug:
            raise
        # one line (SPARSEWATCH_DEBUG=1 or --debug for the traceback)
        click.echo(f"error: {type(exc).__name__}: {first_line(exc)}", err=True)
        sys.exit(1)
    # click returns the exit code of ``ctx.exit(n)`` instead of raising in this mode.
    sys.exit(result if isinstance(result, int) else 0)
