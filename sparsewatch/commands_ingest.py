"""``sparsewatch ingest --from-topic T``: bridge a live topic of JSON records to the workers."""

from __future__ import annotations

import json
import logging
import re
import signal
from contextlib import ExitStack
from typing import Any

import click
from confluent_kafka import Consumer, KafkaException

from sparsewatch.cli_types import command_config
from sparsewatch.commands_run import METRICS_ADDRESS_OPTION
from sparsewatch.config import KafkaConfig
from sparsewatch.consumers.health import Health, HeartbeatStopFlag
from sparsewatch.consumers.ingest import DeadLetterSink, IngestRoute, IngestStats, run_ingest
from sparsewatch.consumers.metrics import serve_metrics
from sparsewatch.consumers.retry import (
    TRANSIENT_DB_ERRORS,
    RetryAbandonedError,
    StopFlag,
    with_backoff,
)
from sparsewatch.errors import SparsewatchError, first_line
from sparsewatch.kafka_options import (
    BOOTSTRAP_OPTION,
    CONNECT_TIMEOUT_OPTION,
    SUMMARY_JSON_OPTION,
    UNTIL_IDLE_OPTION,
    broker_topics,
    create_missing_topics,
    field_mapping,
    field_mapping_options,
    reads_topic,
    source_topics,
    topic_names,
)
from sparsewatch.logs import setup_logging
from sparsewatch.runner import open_results_store
from sparsewatch.storage.engine import mask_url
from sparsewatch.storage.store import Store

log = logging.getLogger(__name__)

_ADDRESS_SETTING = "metrics_address, SPARSEWATCH_METRICS_ADDRESS"

# The most messages the Kafka client hands over in one call (confluent-kafka's ``consume``
# refuses more with a ValueError, which stopped the bridge as an unexpected error).
MAX_BATCH_SIZE = 1_000_000


def _group_id(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--group``: a consumer group id the Kafka client accepts; a usage error for a blank one
    (the client takes it for no group at all and aborted the process, status 134)."""
    if value is not None and not value.strip():
        raise click.BadParameter("a consumer group id cannot be blank")
    return value


_INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")  # Kafka's own bookkeeping

# What POSIX extended regular expressions (how librdkafka reads a ^ source) and Python's re
# both accept but read otherwise: a backslash before a letter (\d is a plain d there; \w \W \s
# \S \b \B mean the same in both), a character class ([[:digit:]] is a set of [:digt in re)
_NOT_AS_IN_PYTHON = re.compile(r"\\[A-Za-z](?<![wWsSbB])|\[:[A-Za-z]+:\]")


def _posix_reading(found: str) -> str:
    """How librdkafka reads ``found`` (a match of :data:`_NOT_AS_IN_PYTHON`), and what to write."""
    if found.startswith("\\"):
        instead = {"d": "[0-9]", "D": "[^0-9]"}.get(found[1])
        return f"a plain {found[1]} there" + (f": write {instead}" if instead else "")
    return "a class there, in Python a set of its letters: spell it out, e.g. [0-9] for [[:digit:]]"


def _sources(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """``--from-topic``: topic names and ``^`` patterns (:func:`source_topics`), a pattern being
    one that librdkafka, which subscribes with it as a POSIX extended regular expression, reads
    as Python's ``re`` does (the matches shown and refused are Python's): a usage error for one
    it refuses (``(?:...)``, ``(?!...)``: the bridge stopped with a bare Kafka error) or reads
    otherwise (``\\d``, a plain ``d`` there: the bridge read nothing, without a word;
    ``[[:digit:]]``, which Python's ``re`` reads as a set of ``[:digt``). A source given twice
    is read once (librdkafka refuses a subscription naming a topic twice)."""
    patterns = [source for source in value if source.startswith("^")]
    for pattern in patterns:  # (before Python compiles them: [[:digit:]] is a FutureWarning)
        if differs := _NOT_AS_IN_PYTHON.search(pattern):
            raise click.BadParameter(
                f"{pattern!r}: librdkafka reads a ^ source as a POSIX extended regular "
                f"expression, where {differs.group()} is not what it is in Python "
                f"({_posix_reading(differs.group())})"
            )
    source_topics(ctx, param, value)
    for pattern in patterns:
        if not _librdkafka_compiles(pattern):
            raise click.BadParameter(
                f"{pattern!r} is not a POSIX extended regular expression, which librdkafka "
                "reads (no (?...) groups or flags)"
            )
    return tuple(dict.fromkeys(value))


def _librdkafka_compiles(pattern: str) -> bool:
    """Whether librdkafka accepts ``pattern`` in a subscription (it compiles it locally, as a
    POSIX extended regular expression)."""
    consumer = Consumer({"group.id": "sparsewatch-pattern-check", "log_level": 0})
    try:
        consumer.subscribe([pattern])
    except KafkaException:
        return False
    finally:
        consumer.close()
    return True


@click.command()
@click.option(
    "--from-topic",
    "source_topics",
    multiple=True,
    required=True,
    callback=_sources,
    help="Topic of JSON records to read; repeat for several. Starting with ^, a POSIX extended "
    "regular expression: every topic it matches, those created later too (e.g. '^tweets\\..*', "
    "'^tweets-[0-9]+$').",
)
@click.option(
    "--to-topic",
    default=None,
    callback=topic_names,
    help="Topic the documents go to (default: <prefix>.docs, the detector's input).",
)
@BOOTSTRAP_OPTION
@click.option(
    "--group",
    default=None,
    callback=_group_id,
    help="Consumer group of the bridge (default: <group_id>.ingest); it resumes where the "
    "group's committed offsets say.",
)
@click.option(
    "--instance",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="This bridge's number within its group: several bridges in one group need different "
    "numbers; a restart keeps its number (its transactional id is <group>-<instance>).",
)
@field_mapping_options
@click.option(
    "--kafka-timestamp",
    is_flag=True,
    help="The record's Kafka timestamp is the event time (no timestamp field is read).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1, max=MAX_BATCH_SIZE),
    default=1000,
    show_default=True,
    help="Most records per transaction: larger batches spread its commit over more records.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=0,
    help="Serve Prometheus metrics (records forwarded and dead-lettered, transactions, batch "
    "time, source lag) and the /healthz and /readyz probes on port PORT of metrics_address "
    "(127.0.0.1 by default; default 0: not served).",
)
@METRICS_ADDRESS_OPTION
@click.option(
    "--database/--no-database",
    "to_database",
    default=True,
    show_default=True,
    help="Also record the dead letters in the results database (database_url), where "
    "`sparsewatch dead-letters` lists them with the workers' own.",
)
@UNTIL_IDLE_OPTION
@CONNECT_TIMEOUT_OPTION
@SUMMARY_JSON_OPTION
@click.pass_context
def ingest(
    ctx: click.Context,
    source_topics: tuple[str, ...],
    to_topic: str | None,
    bootstrap_servers: str | None,
    group: str | None,
    instance: int,
    kafka_timestamp: bool,
    batch_size: int,
    metrics_port: int,
    metrics_address: str | None,
    to_database: bool,
    until_idle: float | None,
    connect_timeout: float,
    as_json: bool,
    **mapping_options: Any,
) -> None:
    """Map a live topic's JSON records (tweets, a news feed) to documents on the detector's
    input topic, exactly once, keyed by stream.

    Fields are picked as `replay` picks them (a.b reads a nested field, e.g. user.lang); records
    that cannot be mapped go to the dead-letter topic <prefix>.dlq with the reason, and to the
    results database (see `sparsewatch dead-letters`) unless --no-database. Each batch's
    documents, dead letters and consumed offsets commit in one Kafka transaction, so a crash or a
    restart neither loses nor repeats a record. SIGTERM or Ctrl-C: the batch in progress commits,
    then the bridge stops.
    """
    config = command_config(ctx)
    mapping = field_mapping(mapping_options)
    if kafka_timestamp and mapping.timestamp is not None:
        raise click.UsageError("give --timestamp-field or --kafka-timestamp, not both")
    docs_topic = to_topic or config.kafka.topic("docs")
    check_docs_topic(docs_topic, config.kafka)
    _check_sources(source_topics, docs_topic, config.kafka.topic("dlq"))
    route = IngestRoute(
        bootstrap=config.kafka.connection(bootstrap_servers),
        group_id=group or f"{config.kafka.group_id}.ingest",
        source_topics=source_topics,
        docs_topic=docs_topic,
        dlq_topic=config.kafka.topic("dlq"),
        instance=instance,
    )
    setup_logging(config.log_level)
    health = Health(config.health_stall_s)
    heartbeat = health.heartbeat(
        "ingest", "reaching the broker, the database and Kafka transactions"
    )
    with ExitStack() as cleanup:
        # (from the start: the probes answer while the bridge reaches the broker and database)
        cleanup.callback(
            serve_metrics(
                metrics_port,
                "--metrics-port",
                "ingest",
                metrics_address or config.metrics_address,
                "--metrics-address" if metrics_address else _ADDRESS_SETTING,
                health,
            )
        )
        _prepare_topics(route, config.kafka.partitions, connect_timeout)
        store = None
        if to_database:
            store = open_results_store(config)
            cleanup.callback(store.dispose)
        # (its waits, for the transaction coordinator and the database, are the bridge's
        # deliberate waits: alive, not ready)
        stop = HeartbeatStopFlag(heartbeat)
        for sig in (signal.SIGTERM, signal.SIGINT):
            cleanup.callback(signal.signal, sig, signal.signal(sig, stop.request))
        try:
            stats = run_ingest(
                route,
                mapping,
                stop,
                max_text_bytes=config.max_text_bytes,
                kafka_time=kafka_timestamp,
                until_idle_s=until_idle,
                batch_size=batch_size,
                record_dead_letters=None if store is None else _dead_letter_sink(store, stop),
                health=heartbeat,
            )
        except RetryAbandonedError as exc:
            raise SparsewatchError(f"{exc}; the batch is read again at the next start") from None
        except TRANSIENT_DB_ERRORS as exc:
            raise SparsewatchError(
                f"cannot record dead letters in {mask_url(config.resolved_database_url)} "
                f"(retried for 2 minutes): {first_line(exc)}"
            ) from None
    _report(stats, route, as_json)


def check_docs_topic(docs_topic: str, kafka: KafkaConfig, option: str = "--to-topic") -> None:
    """A usage error for a documents topic (``option``: ``ingest --to-topic``, ``replay
    --topic``) that is Kafka's own bookkeeping, or ``kafka``'s scores, dead-letter or alerts
    topic, where documents would be read as results, refusals or alerts."""
    if docs_topic in _INTERNAL_TOPICS:
        raise click.UsageError(f"{option} {docs_topic} is Kafka's internal topic")
    for role, what in (("scores", "scores"), ("dlq", "dead-letter"), ("alerts", "alerts")):
        if docs_topic == kafka.topic(role):
            raise click.UsageError(
                f"{option} {docs_topic} is the {what} topic, not a documents topic"
            )


def _check_sources(source_topics: tuple[str, ...], docs_topic: str, dlq_topic: str) -> None:
    """A usage error for a source (``--from-topic``, a name or a ^pattern) that is or matches
    the bridge's own output (a loop: ``docs_topic``, ``dlq_topic``) or Kafka's own bookkeeping."""
    forbidden = {
        docs_topic: "the topic the documents go to",
        dlq_topic: "the topic the dead letters go to",
    } | dict.fromkeys(_INTERNAL_TOPICS, "Kafka's internal topic")
    for source in source_topics:
        for topic, what in forbidden.items():
            if source == topic:
                raise click.UsageError(f"--from-topic {source} is {what}")
            if reads_topic(source, topic):
                raise click.UsageError(f"--from-topic {source} matches {topic}, {what}")


def _dead_letter_sink(store: Store, stop: StopFlag) -> DeadLetterSink:
    """Dead letters into the ``dead_letters`` table (a record already there stays as it is),
    retried with backoff while the database is unavailable, abandoned when ``stop`` is set."""

    def record(rows: list[dict[str, Any]]) -> None:
        with_backoff(lambda: store.insert_dead_letters(rows), "recording dead letters", stop=stop)

    return record


def _prepare_topics(route: IngestRoute, partitions: int, timeout: float) -> None:
    """One-line errors for an unreachable broker and a missing source topic (a pattern that
    matches no topic yet is only a warning: its topics are read once created); the documents
    and dead-letter topics are created when missing (as the workers create them)."""
    known = broker_topics(route.bootstrap, timeout)
    for source in route.source_topics:
        if not any(reads_topic(source, topic) for topic in known):
            if not source.startswith("^"):
                raise SparsewatchError(f"no topic {source!r} on the broker at {route.bootstrap}")
            log.warning("no topic matches %s yet; its topics are read once created", source)
    create_missing_topics(
        route.bootstrap, {route.docs_topic: partitions, route.dlq_topic: 1}, timeout
    )


def _report(stats: IngestStats, route: IngestRoute, as_json: bool) -> None:
    result = {
        "read": stats.read,
        "forwarded": stats.forwarded,
        "dead_lettered": stats.dead_lettered,
        "transactions": stats.transactions,
        "aborted": stats.aborted,
        "busy_s": round(stats.busy_s, 3),
        "to_topic": route.docs_topic,
        "dlq_topic": route.dlq_topic,
        "dead_letter_reasons": stats.per_reason,
    }
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
        return
    click.echo(
        f"read {stats.read}, forwarded {stats.forwarded} to {route.docs_topic}, dead-lettered "
        f"{stats.dead_lettered} to {route.dlq_topic} ({stats.transactions} transactions, "
        f"{stats.aborted} aborted and read again)"
    )
    for reason, n in sorted(stats.per_reason.items(), key=lambda item: -item[1])[:10]:
        click.echo(f"  {n:8d}  {reason}")
