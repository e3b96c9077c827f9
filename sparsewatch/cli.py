"""Command line interface: ``sparsewatch <command>``.

Every command reports problems caused by its input or environment as one line on stderr and a
non-zero exit status; ``--debug`` (or ``SPARSEWATCH_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import os
import sys

import click

from sparsewatch.cli_types import not_blank
from sparsewatch.errors import SparsewatchError, first_line


@click.group()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="SPARSEWATCH_CONFIG",
    callback=not_blank,  # ("" meant no file, or SPARSEWATCH_CONFIG's over the command line)
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


def _register() -> None:
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
        cli.add_command(command)
    for command in (replay, ingest, run, demo, evaluate):
        cli.add_command(command)


_register()


# What click's ``--debug`` flag reads as true in ``SPARSEWATCH_DEBUG`` (its BOOL type);
# "false", "no" or "off" showed tracebacks, since only "" and "0" counted as off.
_TRUE = ("1", "true", "t", "yes", "y", "on")


def _one_line(message: str) -> str:
    """click's ``message`` on one line (a missing choice argument listed its choices one per
    line: "Choose from:\n\tdetector,\n\tanomaly,\n\tall")."""
    return " ".join(message.split())


def main() -> None:
    """Console entry point: run the click group, turning errors into one-line messages."""
    debug = (
        os.environ.get("SPARSEWATCH_DEBUG", "").strip().lower() in _TRUE or "--debug" in sys.argv
    )
    try:
        result = cli.main(standalone_mode=False)
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
