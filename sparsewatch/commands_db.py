"""``sparsewatch db upgrade|prune|forget-group``: the results database's schema, its size, and the
state kept for consumer groups."""

from __future__ import annotations

import json
from datetime import datetime

import click
import sqlalchemy as sa
from confluent_kafka import KafkaException

from sparsewatch.cli_types import command_config, utf8_name
from sparsewatch.config import MAX_INT64
from sparsewatch.consumers.kafka_admin import (
    NonEmptyGroupError,
    consumer_group_members,
    delete_consumer_group,
)
from sparsewatch.errors import SparsewatchError
from sparsewatch.kafka_options import BOOTSTRAP_OPTION, KAFKA_TIMEOUT_OPTION
from sparsewatch.query_options import DATABASE_OPTION, STREAMS_OPTION, TIME, open_store
from sparsewatch.storage.engine import (
    create_engine,
    is_in_memory_sqlite,
    mask_url,
    sqlite_file,
    sqlite_uri_file,
)
from sparsewatch.storage.retention import gather_statistics

DRY_RUN_OPTION = click.option(
    "--dry-run", is_flag=True, help="Count what would be deleted; delete nothing."
)
JSON_COUNTS_OPTION = click.option(
    "--json", "as_json", is_flag=True, help="Print the counts as JSON."
)


def _refuse_an_older_schema(ctx: click.Context, database_url: str | None) -> None:
    """A dry run changes nothing, the schema included: opening the store migrates a database an
    older sparsewatch set up, so such a database is refused before it is opened. A database that
    cannot be read here (missing, empty, unreachable, a newer sparsewatch's) is left to
    :func:`~sparsewatch.query_options.open_store`, which reports it without creating it."""
    from sparsewatch.storage import migrate  # Alembic only when needed

    try:
        config = command_config(ctx)
        url = database_url or config.resolved_database_url
        if is_in_memory_sqlite(url):
            return
        path = sqlite_file(url) or sqlite_uri_file(url)
        if path is not None and not path.exists():
            return
        engine = create_engine(url)
        try:
            current = migrate.current_revision(engine)
        finally:
            engine.dispose()
    except (SparsewatchError, sa.exc.SQLAlchemyError, OSError, ValueError):
        return
    if migrate.is_older_revision(current):
        raise SparsewatchError(
            f"the database {mask_url(url)} is at schema revision {current!r}, older than this "
            f"sparsewatch's {migrate.head_revision()!r}: a dry run changes nothing, so it does "
            "not migrate it; run 'sparsewatch db upgrade' first (the workers also migrate it "
            "when they start)"
        )


@click.group()
def db() -> None:
    """The results database: schema migrations, retention, consumer groups' state."""


@db.command()
@DATABASE_OPTION
@click.pass_context
def upgrade(ctx: click.Context, database_url: str | None) -> None:
    """Apply the schema migrations (also done automatically on first use) and, on SQLite,
    gather the query planner's statistics (ANALYZE; also done by prune)."""
    with open_store(ctx, database_url, create=True) as store:
        store.upgrade()
        gather_statistics(store.engine)
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
    type=click.IntRange(1, MAX_INT64),
    default=100,
    show_default=True,
    help="Windows each stream keeps, however old (at least windows.checkpoint_every: a "
    "restarted worker recomputes that many).",
)
@click.option(
    "--keep-snapshots",
    type=click.IntRange(0, MAX_INT64),
    default=1,
    show_default=True,
    help="Newest snapshots each stream keeps per model kind, however old.",
)
@STREAMS_OPTION
@DRY_RUN_OPTION
@JSON_COUNTS_OPTION
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
    """Delete old results so that the database stops growing (checkpoints and offsets stay);
    on SQLite, then gather the query planner's statistics (ANALYZE)."""
    if before is None and dead_letters_before is None:
        raise click.UsageError("give --before, --dead-letters-before or both")
    every = command_config(ctx).windows.checkpoint_every
    if keep_windows < every:  # the windows a restarted worker recomputes must keep their rows
        raise click.BadParameter(
            f"{keep_windows} is below windows.checkpoint_every ({every}): a restarted worker "
            "recomputes that many windows and would store a pruned one's rows and alerts again",
            param_hint="'--keep-windows'",
        )
    if dry_run:
        _refuse_an_older_schema(ctx, database_url)
    with open_store(ctx, database_url, read_only=False) as store:
        report = store.prune(
            before=before,
            keep_windows=keep_windows,
            keep_snapshots=keep_snapshots,
            streams=streams,
            dead_letters_before=dead_letters_before,
            dry_run=dry_run,
        )
    kept = report.kept_pending_alerts
    if as_json:
        result = {"dry_run": dry_run, "deleted": report.deleted, "kept_pending_alerts": kept}
        click.echo(json.dumps(result, sort_keys=True))
        return
    counts = ", ".join(f"{n} {table.replace('_', ' ')}" for table, n in report.deleted.items())
    line = f"{'would delete' if dry_run else 'deleted'} {counts}"
    if kept:
        line += f"; {'would keep' if dry_run else 'kept'} {kept} alerts still pending publication"
    click.echo(line)


def _broker_state(bootstrap: str, group: str, timeout: float, dry_run: bool) -> str:
    """Delete ``group`` on the broker (or, in a dry run, say whether that would work): "deleted",
    "would delete" or "not found"; a group with members, or a broker that does not answer, is a
    one-line error."""
    live = "has members on the broker (a running worker, or one stopped less than its session "
    live += "timeout ago): stop its workers and try again"
    try:
        if dry_run:
            members = consumer_group_members(bootstrap, group, timeout)
            if members:
                raise SparsewatchError(f"consumer group {group!r} {live}")
            return "not found" if members is None else "would delete"
        return "deleted" if delete_consumer_group(bootstrap, group, timeout) else "not found"
    except NonEmptyGroupError:
        raise SparsewatchError(f"consumer group {group!r} {live}; it was not forgotten") from None
    except (KafkaException, TimeoutError) as exc:
        why = exc.args[0].str() if isinstance(exc, KafkaException) else "timed out"
        raise SparsewatchError(
            f"cannot reach Kafka at {bootstrap}: {why} (--no-kafka forgets the group in the "
            "database only)"
        ) from None


@db.command("forget-group")
@click.argument("groups", nargs=-1, required=True, callback=utf8_name)
@BOOTSTRAP_OPTION
@click.option(
    "--no-kafka",
    is_flag=True,
    help="Forget in the database only, without asking the broker whether the group's workers "
    "have stopped; its committed offsets there stay.",
)
@KAFKA_TIMEOUT_OPTION
@DRY_RUN_OPTION
@JSON_COUNTS_OPTION
@DATABASE_OPTION
@click.pass_context
def forget_group(
    ctx: click.Context,
    groups: tuple[str, ...],
    bootstrap_servers: str | None,
    no_kafka: bool,
    kafka_timeout: float,
    dry_run: bool,
    as_json: bool,
    database_url: str | None,
) -> None:
    """Forget consumer groups no longer used (GROUPS as `status` lists them, e.g.
    sparsewatch.detector): their checkpoints and resume offsets in the database and, unless
    --no-kafka, the group and its committed offsets on the broker. Results stay. A group with
    members on the broker is refused. A worker started later under a forgotten group builds its
    models afresh, from the first retained messages (with --no-kafka: from the offsets the
    group committed on the broker)."""
    config = command_config(ctx)
    bootstrap = config.kafka.connection(bootstrap_servers)
    report: dict[str, dict[str, int | str]] = {}
    if dry_run:
        _refuse_an_older_schema(ctx, database_url)
    with open_store(ctx, database_url, read_only=False) as store:
        known = store.groups()
        unknown = [g for g in dict.fromkeys(groups) if g not in known]
        broker: dict[str, str] = {}
        if not no_kafka:  # the broker first: it refuses a live group before anything is deleted
            for group in dict.fromkeys(groups):
                broker[group] = _broker_state(bootstrap, group, kafka_timeout, dry_run=True)
            unknown = [g for g in unknown if broker[g] == "not found"]
        if unknown:
            where = "in the database" + ("" if no_kafka else " or on the broker")
            have = ", ".join(known) if known else "none"
            raise SparsewatchError(
                f"no consumer group {', '.join(map(repr, unknown))} {where} (the database keeps "
                f"state for: {have})"
            )
        for group in dict.fromkeys(groups):
            if not no_kafka and not dry_run:
                broker[group] = _broker_state(bootstrap, group, kafka_timeout, dry_run=False)
            report[group] = {
                **store.forget_group(group, dry_run=dry_run),
                "broker": broker.get(group, "not asked"),
            }
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "groups": report}, sort_keys=True))
        return
    for group, counts in report.items():
        verb = "would forget" if dry_run else "forgot"
        on_broker = {
            "deleted": "; deleted on the broker",
            "would delete": "; would delete it on the broker",
            "not found": "; no such group on the broker",
            "not asked": "; the broker was not asked (--no-kafka)",
        }[str(counts["broker"])]
        click.echo(
            f"{verb} {group}: {counts['checkpoints']} checkpoints, "
            f"{counts['partition_offsets']} resume offsets{on_broker}"
        )
