"""``sparsewatch status``: how far the workers have got, from the database and the broker.

Per stream: closed windows, the last one's event-time end, stored documents (novel, late,
anomaly-scored), alerts by kind and the newest checkpoint per worker. Per consumer group and
topic partition: the resume offset stored with the last committed window and, when the broker
answers, the partition's end offset; the difference is what is not yet in the database (messages
still buffered in open windows, or not read yet). Per partition of the topics the ingest bridge
reads (its group's offsets, committed on the broker): what it has not forwarded yet. A broker
that does not answer is a note, not an error: the database part is still printed.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
from confluent_kafka import KafkaError, KafkaException
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sparsewatch.cli_types import command_config
from sparsewatch.consumers.kafka_client import SecurityErrors, client_properties
from sparsewatch.consumers.messages import looks_like_epoch_seconds
from sparsewatch.errors import first_line
from sparsewatch.kafka_options import (
    BOOTSTRAP_OPTION,
    KAFKA_TIMEOUT_OPTION,
    KafkaUnreachableError,
    broker_topics,
    reporting_admin_client,
)
from sparsewatch.query_options import DATABASE_OPTION, STREAMS_OPTION, open_store
from sparsewatch.query_output import (
    TableConsole,
    echo_data,
    encodable,
    json_value,
    printable,
    show_time,
)
from sparsewatch.storage.schema import ALERT_KINDS

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

Watermarks = dict[tuple[str, int], tuple[int, int]]


def watermarks(
    bootstrap: str, topics: list[str], timeout: float
) -> tuple[Watermarks, list[str], str | None]:
    """Every partition's (low, high) watermark of those ``topics`` the broker has, the topics it
    does not have, and ``None``; or what is known so far and why the broker did not tell the
    rest. A client the broker refuses (a wrong password) is told within about a second, not
    after ``timeout`` (:func:`broker_topics`)."""
    from confluent_kafka import Consumer, TopicPartition

    try:
        broker_topics(bootstrap, timeout)
    except KafkaUnreachableError as exc:
        return {}, [], f"Kafka at {bootstrap} did not answer: {exc.why}"
    errors = SecurityErrors()
    consumer = Consumer(
        {
            **client_properties(bootstrap, "consumer"),
            "group.id": f"sparsewatch-status-{uuid.uuid4().hex}",  # never joins: no subscribe
            "enable.auto.commit": False,
            "log_level": 0,
            "error_cb": errors,
        }
    )
    marks: Watermarks = {}
    missing = []
    try:
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                missing.append(topic)  # deleted, or another broker
                continue
            for partition in sorted(meta.partitions):
                tp = TopicPartition(topic, partition)
                low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
                marks[(topic, partition)] = (int(low), int(high))
    except KafkaException as exc:
        why = errors.why(consumer, first_line(exc))
        return marks, missing, f"Kafka at {bootstrap} did not answer: {why}"
    finally:
        consumer.close()
    return marks, missing, None


# Up to this many offsets behind, a partition's unstored records are counted by reading them
# (read committed, as the workers do); beyond, the offset difference stands (an upper bound).
_COUNT_UP_TO = 10_000


def count_committed(
    bootstrap: str, ranges: dict[tuple[str, int], tuple[int, int]], timeout: float
) -> dict[tuple[str, int], int]:
    """Per (topic, partition), the records a read-committed consumer gets from ``start`` up to
    ``end`` (``ranges``' values): offsets hold transaction markers too (one per transaction of a
    transactional producer such as the ingest bridge), which no worker ever stores, so the
    offset difference stayed at 1 or more for a caught-up worker. Records of a transaction
    still open count as not stored. A partition not read to its end within ``timeout`` keeps its
    offset difference."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    counts = {tp: 0 for tp in ranges}
    consumer = Consumer(
        {
            **client_properties(bootstrap, "consumer"),
            "group.id": f"sparsewatch-status-{uuid.uuid4().hex}",  # never joins: assign only
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "log_level": 0,
        }
    )
    open_tps = set(ranges)
    try:
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in ranges.items()])
        deadline = time.monotonic() + timeout
        while open_tps and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.2):
                tp, offset, error = (msg.topic(), msg.partition()), msg.offset(), msg.error()
                if tp not in open_tps or offset is None:  # None: an error at no offset
                    continue
                end = ranges[tp][1]
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:  # offset: the partition's end
                        counts[tp] += max(end - offset, 0)  # an open transaction's
                        open_tps.discard(tp)
                elif offset < end:
                    counts[tp] += 1
                else:
                    open_tps.discard(tp)
    finally:
        consumer.close()
    return {tp: n for tp, n in counts.items() if tp not in open_tps}


def _count_not_stored(rows: list[dict[str, Any]], bootstrap: str, timeout: float) -> None:
    """Replace each row's offset difference by the records behind it, where up to
    ``_COUNT_UP_TO`` (:func:`count_committed`; one consumer per group: two groups may stand at
    different offsets of one partition)."""
    for group in {o["group_id"] for o in rows}:
        mine = [o for o in rows if o["group_id"] == group and (o["not_stored"] or 0) > 0]
        ranges = {
            (o["topic"], o["partition"]): (o["end_offset"] - o["not_stored"], o["end_offset"])
            for o in mine
            if o["not_stored"] <= _COUNT_UP_TO
        }
        if ranges:
            counted = count_committed(bootstrap, ranges, timeout)
            for o in mine:
                o["not_stored"] = counted.get((o["topic"], o["partition"]), o["not_stored"])


def _deleted_unread(offset: int | None, low: int | None) -> int | None:
    """Messages from ``offset`` on that the broker has deleted (its retention) before they were
    read: ``low``, the partition's first retained offset, is past them; None when unknown."""
    return None if offset is None or low is None else max(low - offset, 0)


def offset_rows(
    stored: list[dict[str, Any]], groups: dict[str, str], marks: Watermarks
) -> list[dict[str, Any]]:
    """One row per (group, topic, partition): the stored resume offset (``None`` if the group
    has stored none there), the broker's end offset and what the database does not hold yet
    (from the resume offset, or from the partition's first retained message). ``groups`` maps
    the configured groups to their topics: their partitions are listed even before a window of
    theirs is stored. ``deleted_unread``: the messages after the resume offset the broker has
    already deleted (the worker will skip them, with an error: their results are lost); what is
    not stored counts from the first retained message."""
    resume = {(o["group_id"], o["topic"], o["partition"]): o["next_offset"] for o in stored}
    pairs = {(g, t) for g, t, _ in resume} | set(groups.items())
    rows = []
    for group, topic in sorted(pairs):
        partitions = {p for g, t, p in resume if (g, t) == (group, topic)}
        partitions |= {p for t, p in marks if t == topic}
        for partition in sorted(partitions):
            next_offset = resume.get((group, topic, partition))
            low, high = marks.get((topic, partition), (None, None))
            deleted = _deleted_unread(next_offset, low)
            start = low if next_offset is None else next_offset + (deleted or 0)
            behind = None if high is None or start is None else max(high - start, 0)
            rows.append(
                {
                    "group_id": group,
                    "topic": topic,
                    "partition": partition,
                    "next_offset": next_offset,
                    "end_offset": high,
                    "not_stored": behind,
                    "deleted_unread": deleted,
                }
            )
    return rows


def ingest_rows(bootstrap: str, group: str, timeout: float) -> list[dict[str, Any]]:
    """One row per partition the ingest bridge's ``group`` has committed an offset on: the
    offset, the partition's end offset and the records not forwarded yet; none for a group
    that never committed. KafkaException when the broker does not answer."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = [ConsumerGroupTopicPartitions(group)]
    with _offsets_admin(bootstrap) as (admin, why):
        answer = admin.list_consumer_group_offsets(request, request_timeout=timeout)[group]
        try:
            # (a second past the request's own timeout: its error, not the wait's, which has none)
            offsets = answer.result(timeout + 1.0).topic_partitions
        except (KafkaException, TimeoutError) as exc:
            error = exc.args[0] if exc.args else None
            said = error.str() if isinstance(error, KafkaError) else first_line(exc)
            raise KafkaException(why(said)) from None
    committed = {(tp.topic, tp.partition): tp.offset for tp in offsets if tp.offset >= 0}
    marks, _, note = watermarks(bootstrap, sorted({t for t, _ in committed}), timeout)
    if note is not None:
        raise KafkaException(note)
    rows = []
    for (topic, partition), offset in sorted(committed.items()):
        low, high = marks.get((topic, partition), (None, None))
        deleted = _deleted_unread(offset, low)
        start = offset + (deleted or 0)
        rows.append(
            {
                "group_id": group,
                "topic": topic,
                "partition": partition,
                "committed_offset": offset,
                "end_offset": high,
                "not_forwarded": None if high is None else max(high - start, 0),
                "deleted_unread": deleted,
            }
        )
    return rows


@contextmanager
def _offsets_admin(bootstrap: str) -> Iterator[tuple[AdminClient, Callable[[str], str]]]:
    """An AdminClient for the block (:func:`~sparsewatch.consumers.kafka_admin.admin_client`:
    polled when the block ends, its librdkafka lines then logged), and a function of a failed
    request's error giving why it failed in one line: the refusal (a wrong password, an
    untrusted certificate) or the connection failures (a closed port, a host that does not
    resolve) its error callback reported, served by a poll. The client was never polled: its
    callbacks never ran, its lines stayed in its queue, and a broker gone since the probe made
    the note end with nothing ("did not tell the ingest bridge's offsets: ", the wait's
    TimeoutError having no message)."""
    with reporting_admin_client(bootstrap) as (admin, errors, failed):

        def why(failure: str) -> str:
            said = errors.why(admin, failure)
            cause = None if errors.last else failed.why()
            return f"{cause} ({said})" if cause else said

        yield admin, why


def _offset_table(
    title: str, headers: tuple[str, ...], keys: tuple[str, ...], rows: list[dict[str, Any]]
) -> Table:
    """A table of ``rows``' ``keys``; a column of the messages the broker deleted unread when a
    row has some (the rare case: a worker or bridge down longer than the topic's retention)."""
    if any(row.get("deleted_unread") for row in rows):
        headers, keys = (*headers, "deleted unread"), (*keys, "deleted_unread")
    table = Table(title=title, title_justify="left")
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(Text(encodable("" if row[k] is None else str(row[k]))) for k in keys))
    return table


def _print_tables(status: dict[str, Any], kafka_note: str | None, filtered: bool) -> None:
    """A few lines per stream (a table of ten columns did not fit a terminal), then a table of
    the stored offsets."""
    click.echo(f"streams ({len(status['streams'])})")
    if not status["streams"]:
        click.echo("  none of those" if filtered else "  none yet: no window has been stored")
    for s in status["streams"]:
        alerts = ", ".join(f"{s['alerts'][kind]} {kind}" for kind in ALERT_KINDS)
        checkpoints = ", ".join(  # by worker: the group id's last part (detector, anomaly)
            f"{group.rsplit('.', 1)[-1]} {show_time(at)}"
            for group, at in sorted(s["checkpoints"].items())
        )
        end = s["last_window_end"]
        last = "" if end is None else f", the last ending {show_time(end)} (event time"
        if s["epoch_seconds_as_ms"]:
            last += "; epoch seconds sent as milliseconds?"
        last += "" if end is None else ")"
        lines = [
            f"{s['stream']}",
            f"  windows: {s['windows']}{last}",
            f"  documents: {s['documents']}, {s['novel']} novel, {s['late']} late, "
            f"{s['anomaly_scored']} anomaly-scored ({s['anomalies']} anomalous)",
            f"  alerts: {alerts}",
            f"  newest checkpoints: {checkpoints or 'none'}",
        ]
        click.echo("\n".join(encodable(printable(line)) for line in lines))
    console = TableConsole(width=max(Console().width, 120))
    headers = ("group", "topic", "partition", "resume offset", "end offset", "to re-read")
    keys = ("group_id", "topic", "partition", "next_offset", "end_offset", "not_stored")
    title = f"partitions ({len(status['offsets'])})"
    console.print(_offset_table(title, headers, keys, status["offsets"]))
    if status.get("ingest"):
        headers = ("group", "topic", "partition", "committed", "end offset", "not forwarded")
        keys = ("group_id", "topic", "partition", "committed_offset", "end_offset", "not_forwarded")
        title = "ingest bridge (offsets on the broker)"
        console.print(_offset_table(title, headers, keys, status["ingest"]))
    click.echo(f"dead letters: {status['dead_letters']}")
    if status["unsent_alerts"]:
        click.echo(
            f"alerts stored and not yet sent to the alerts topic: {status['unsent_alerts']} (sent "
            "with their stream's next window or when their worker starts)"
        )
    if kafka_note:
        click.echo(f"note: {kafka_note}")


@click.command()
@STREAMS_OPTION
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for scripts.",
)
@DATABASE_OPTION
@BOOTSTRAP_OPTION
@click.option("--no-kafka", is_flag=True, help="Only the database: no end offsets.")
@KAFKA_TIMEOUT_OPTION
@click.pass_context
def status(
    ctx: click.Context,
    streams: tuple[str, ...],
    fmt: str,
    database_url: str | None,
    bootstrap_servers: str | None,
    no_kafka: bool,
    kafka_timeout: float,
) -> None:
    """Per stream: windows, documents, alerts (novel / emerging / anomaly), newest checkpoints;
    per partition: how many messages are not yet in the database."""
    with open_store(ctx, database_url) as store:
        result = store.status(streams=streams)
    marks: Watermarks = {}
    groups: dict[str, str] = {}
    note = None
    result["ingest"] = []
    if not no_kafka:
        config = command_config(ctx)
        bootstrap = config.kafka.connection(bootstrap_servers)
        kafka = config.kafka
        groups = {f"{kafka.group_id}.detector": kafka.topic("docs")}
        groups[f"{kafka.group_id}.anomaly"] = kafka.topic("scores")
        stored_topics = {o["topic"] for o in result["offsets"]}
        marks, missing, note = watermarks(
            bootstrap, sorted(stored_topics | set(groups.values())), kafka_timeout
        )
        groups = {g: t for g, t in groups.items() if t not in missing}
        gone = sorted(stored_topics & set(missing))
        if gone and note is None:
            note = f"Kafka at {bootstrap} has no topic {', '.join(gone)}"
        if note is None:
            try:
                result["ingest"] = ingest_rows(bootstrap, f"{kafka.group_id}.ingest", kafka_timeout)
            except (KafkaException, TimeoutError) as exc:
                note = f"Kafka at {bootstrap} did not tell the ingest bridge's offsets: {exc}"
    result["offsets"] = offset_rows(result["offsets"], groups, marks)
    if not no_kafka and note is None:
        _count_not_stored(result["offsets"], bootstrap, kafka_timeout)
    for stream in result["streams"]:  # the replay tool's hint, in the table and the JSON
        end = stream["last_window_end"]
        stamp = None if end is None else round(end.timestamp() * 1000)
        stream["epoch_seconds_as_ms"] = stamp is not None and looks_like_epoch_seconds(stamp)
    if fmt == "json":
        result["kafka"] = "not asked" if no_kafka else (note or "ok")
        text = json.dumps(json_value(result), indent=2, sort_keys=True, ensure_ascii=False)
        echo_data(text)
    else:
        _print_tables(result, note, filtered=bool(streams))
