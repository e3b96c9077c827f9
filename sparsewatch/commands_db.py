"""``sparsewatch db upgrade|prune``: the results database's schema and its size."""

from __future__ import annotations

import json
from datetime import datetime

import click

from sparsewatch.config import load_config
from sparsewatch.query_options import DATABASE_OPTION, STREAMS_OPTION, TIME, open_store
from sparsewatch.storage.engine import mask_url


@click.group()
def db() -> None:
    """The results database: schema migrations, retention."""


@db.command()
@DATABASE_OPTION
@click.pass_context
def upgrade(ctx: click.Context, database_url: str | None) -> None:
    """Apply the schema migrations (also done automatically on first use)."""
    with open_store(ctx, database_url, create=True) as store:
        store.upgrade()
        click.echo(f"database {mask_url(str(store.engine.url))} is at revision {store.revision()}")


@db.command()
@click.option(
    "--before",
    type=TIME,
    default=None,
    help="Delete the windows that ended before this event time (ISO-8601 or 30d, ...) with "
    "their documents, alerts, topics and snapshots.",
)
@click.option(
    "--dead-letters-before",
    type=TIME,
    default=None,
    help="Delete the dead letters stored before this time.",
)
@click.option(
    "--keep-windows",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Windows each stream keeps, however old (at least windows.checkpoint_every: a "
    "restarted worker recomputes that many).",
)
@click.option(
    "--keep-snapshots",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Newest snapshots each stream keeps per model kind, however old.",
)
@STREAMS_OPTION
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@DATABASE_OPTION
@click.pass_context
def prune(
    ctx: click.Context,
    before: datetime | None,
    dead_letters_before: datetime | None,
    keep_windows: int,
    keep_snapshots: int,
    streams: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
    database_url: str | None,
) -> None:
    """Delete old results so that the database stops growing (checkpoints and offsets stay)."""
    if before is None and dead_letters_before is None:
        raise click.UsageError("give --before, --dead-letters-before or both")
    every = load_config(ctx.obj.get("config_path") if ctx.obj else None).windows.checkpoint_every
    if keep_windows < every:  # the windows a restarted worker recomputes must keep their rows
        raise click.BadParameter(
            f"{keep_windows} is below windows.checkpoint_every ({every}): a restarted worker "
            "recomputes that many windows and would store a pruned one's rows and alerts again",
            param_hint="'--keep-windows'",
        )
    with open_store(ctx, database_url) as store:
        report = store.prune(
            before=before,
            keep_windows=keep_windows,
            keep_snapshots=keep_snapshots,
            streams=streams,
            dead_letters_before=dead_letters_before,
            dry_run=dry_run,
        )
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "deleted": report.deleted}, sort_keys=True))
        return
    counts = ", ".join(f"{n} {table.replace('_', ' ')}" for table, n in report.deleted.items())
    click.echo(f"{'would delete' if dry_run else 'deleted'} {counts}")
