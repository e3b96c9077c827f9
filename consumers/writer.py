"""Write-behind of a worker's results: downstream messages, then ONE SQL transaction, off the loop.

A :class:`WriteJob` is everything one transaction stores, as plain data (result rows as
:class:`StoreTx` method calls, the detector's documents as columns; messages, the detector's not
yet encoded; dead letters, checkpoints as arrays, resume offsets), so it can cross a process
boundary. :class:`ResultWriter` performs a job: it produces the messages (encoding them as it
goes) and waits for their delivery, then runs the transaction (retried with backoff on transient
database errors; each wait before a retry, and every 10 s of a wait for the broker to take the
messages, is reported to the loop, ``on_retry(what, seconds)``, which makes it its heartbeat's:
:mod:`~sparsewatch.consumers.health`). With an alerts topic, the transaction stores the job's
alerts pending publication to it, and after the commit the writer sends the pending alerts of
the job's streams (:func:`alert_message`, from the stored rows) and clears their pending topic:
an outbox, so the topic carries only committed alerts
(:meth:`ResultWriter.send_pending_alerts`; a writer sends what a crash left pending when it
starts, and every minute what other writers left).
Two places to run it, at most one job in flight either way:

* :class:`ProcessWriter` (the default, ``writer = "process"``): a child process with its own
  database connection and Kafka producer. Binding tens of thousands of result rows, encoding their
  JSON and driving the database driver is Python work that holds the GIL; on a writer *thread* it
  stalled the loop's numerical work (measured: about 0.7 s of GIL waits per 24,000 documents,
  ``benchmarks/pipeline.md``). In a child it runs on another core. The child dies with its parent
  (``PR_SET_PDEATHSIG``: a ``kill -9`` of the worker kills it too, so no transaction of a dead
  worker can commit after its successor started), ignores SIGINT/SIGTERM (the parent finishes the
  job in flight, then closes the socket) and stops when the socket closes. SIGUSR1 (the parent
  shutting down) makes it abandon a transaction waiting to be retried through a database outage,
  or messages waiting for a broker that delivers nothing.
* :class:`ThreadWriter` (``writer = "thread"``, and always for an in-memory SQLite database, which
  another process cannot open): a thread of the worker's process. (An in-memory database's engine
  holds one connection, which the loop and this thread use in turns:
  :class:`~sparsewatch.storage.engine.OneAtATimePool`.)

The job is pickled (``multiprocessing.connection.Connection``) over a socket pair between the worker
and its own child only; nothing read from Kafka or the database is ever unpickled. The child
answers a job with ``("ok", committed_at)``, ``("fenced", (group, topic, partitions))`` (its
transaction found partitions claimed by another member and stored nothing:
:class:`~sparsewatch.storage.store.PartitionsFencedError`, raised as such in the parent) or
``("error", ...)``, after a ``("retrying", what, seconds)`` for every wait before a retry, which
the parent reads as it waits for the answer or polls for it.

The output, dead-letter and alerts topics may take smaller messages than the producer's
1,000,000 bytes (their ``max.message.bytes``): the broker refuses a record batch over that limit
whole, and the job failed, and with it the worker, at every restart again (a window's few
hundred score messages of 450 bytes are one batch; a dead letter carries up to 512 KiB of the
refused message). :func:`make_writer` reads their limits
(:class:`~sparsewatch.consumers.kafka_admin.TopicLimits`; a dead-letter topic below
:data:`~sparsewatch.consumers.kafka_admin.MIN_DEAD_LETTER_TOPIC_BYTES` is a one-line error): the
producer batches at most the smallest one, and a dead letter's copy of the refused message is cut
to fit the dead-letter topic, a ``truncated_from_bytes`` header giving its size (the database
keeps it whole). An alert too large for the alerts topic (a story's ``related_ids``: up to 100 ids
of up to 512 characters) loses its related ids, then as much of its summary as needed, then its
terms, a ``truncated`` header naming what it lost; one that does not fit even then (a topic
smaller than its stream and subject) is logged and not published: no window fails for it.

Between two jobs, after one's commit (and, in the process, after its answer) and never inside its
transaction, the writer gathers SQLite's planner statistics when the documents have grown enough
(:class:`~sparsewatch.storage.retention.StatisticsRefresh`), so that a database only the workers
write still gets them; a failure there is logged, and the worker goes on.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import logging
import math
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from typing import Any, Protocol

import numpy as np
import sqlalchemy as sa
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from sparsewatch.consumers.kafka_admin import TopicLimits
from sparsewatch.consumers.kafka_client import dead_letter_message, make_producer, produce
from sparsewatch.consumers.memory import map_large_allocations
from sparsewatch.consumers.retry import (
    TRANSIENT_DB_ERRORS,
    ReportedStop,
    RetryAbandonedError,
    Stop,
    StopFlag,
    with_backoff,
)
from sparsewatch.storage.engine import is_in_memory_sqlite
from sparsewatch.storage.retention import StatisticsPolicy, StatisticsRefresh
from sparsewatch.storage.serialization import arrays_to_npz
from sparsewatch.storage.store import PartitionsFencedError, Store, StoreTx
from sparsewatch.storage.values import opt_int

from sparsewatch.config import WRITER_MODES
from sparsewatch.errors import first_line
from sparsewatch.logs import setup_logging

log = logging.getLogger(__name__)


StoreCall = tuple[str, tuple[Any, ...]]
"""A :class:`StoreTx` method name and its positional arguments."""

Messages = Iterable[tuple[str, bytes]]
"""Messages for the output topic, ``(key, value)`` each: a list, or a
:class:`~sparsewatch.consumers.score_messages.ScoreMessages` that encodes them as they are sent."""

StateAndMeta = tuple[dict[str, np.ndarray], dict[str, Any]]
"""A stream's checkpoint: its windows' and models' arrays, and its metadata."""

# How many pending alerts are sent and marked published at a time.
_PENDING_BATCH = 500
# How often a writer sends the alerts left pending by others (see send_pending_alerts), and how
# long an alert must have been pending to count as left.
_SWEEP_EVERY_S = 60
_LEFTOVER_AGE_S = 30

# Blocked from the start of a writer process until it has set its own handlers for them.
_CHILD_SIGNALS = frozenset({signal.SIGUSR1, signal.SIGINT, signal.SIGTERM})

# A job's errors that are the environment's, not a bug (sparsewatch/runner.py reports them in one
# line): the writer process logs their traceback at DEBUG only.
_ENVIRONMENT_ERRORS = (RetryAbandonedError, KafkaException, *TRANSIENT_DB_ERRORS)

# A stop request abandons the delivery of a job's messages once none was delivered for this long
# (the broker is down; a broker that answers is waited for).
_STALLED_S = 2.0
# How often a wait for the delivery of a job's messages is logged and reported to the loop.
_FLUSH_REPORT_S = 10.0
# How often an idle writer polls its producer (the delivery reports, errors and librdkafka's log
# lines are served only by a poll: an idle writer's connection failures were logged only once
# the broker was back and the next job polled).
_IDLE_POLL_S = 1.0

_STORE_CALLS = frozenset(
    {
        "upsert_window",
        "insert_documents",
        "upsert_anomaly_scores",
        "insert_alerts",
        "upsert_topics",
        "put_snapshot",
    }
)


ALERT_KEY_HEADER = "alert_key"
"""The header of an alert message giving its natural key, the alerts table's unique key, the same
on a message sent again: the JSON array ``["kind","stream","subject_id"]`` (:func:`alert_key`;
a text joined with a separator would be ambiguous, as stream names and ids may hold any
character)."""

TRUNCATED_HEADER = "truncated"
"""The header of an alert message cut to fit its topic: what it lost (``related_ids,summary``)."""

# What an alert too large for its topic loses, in this order (_cut_alert).
_ALERT_CUTS = ("related_ids", "summary", "terms")

_ALERT_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)


@dataclass(frozen=True)
class Destination:
    """Where a worker's jobs go: its broker and topics (the alerts topic ``None`` when alerts are
    not published; with the message size limits of those it writes to, as :func:`make_writer`
    reads them), and its consumer group in the store."""

    bootstrap: str
    group_id: str
    input_topic: str
    output_topic: str | None
    dlq_topic: str
    alerts_topic: str | None = None
    limits: TopicLimits = field(default_factory=TopicLimits)
    # the kinds of alert its jobs store: whose pending alerts it sends (all when None)
    alert_kinds: tuple[str, ...] | None = None


@dataclass
class WriteJob:
    """One transaction's contents, in the order they are applied."""

    calls: list[StoreCall] = field(default_factory=list)
    messages: list[Messages] = field(default_factory=list)  # a batch per window's output
    dead: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: dict[str, StateAndMeta] = field(default_factory=dict)
    offsets: dict[int, int] = field(default_factory=dict)
    # The worker's owner token of each partition it writes for (Store.claim_partitions): the
    # transaction stores nothing once another member has claimed one (PartitionsFencedError).
    owners: dict[int, str] = field(default_factory=dict)


class Pending(Protocol):
    """A job handed to a writer; ``result()`` waits for its commit and returns its
    ``time.perf_counter()`` (CLOCK_MONOTONIC: comparable across the worker's processes);
    ``ready()`` says, without waiting, whether ``result()`` would return (or raise) at once."""

    def result(self) -> float: ...

    def ready(self) -> bool: ...


class Writer(Protocol):
    """Where a worker's jobs run: :class:`ProcessWriter` or :class:`ThreadWriter`."""

    def submit(self, job: WriteJob) -> Pending: ...

    def raise_if_gone(self) -> None:
        """Raise :class:`WriterError` if the writer died while no job was in flight (a job in
        flight learns it from its own result)."""
        ...

    def abandon_retries(self) -> None: ...

    def close(self) -> None: ...


class DeliveryError(RuntimeError):
    """Kafka refused messages a job produced (delivery reports with an error)."""


class WriterError(RuntimeError):
    """A job failed (nothing of it was committed), or the writer process died."""


OnRetry = Callable[[str, float], None]
"""``on_retry(what, seconds)``: a writer waits ``seconds`` before retrying ``what``."""


class ResultWriter:
    """Performs jobs against one store and one producer; ``on_retry`` hears of every wait
    before a retried transaction."""

    def __init__(
        self,
        store: Store,
        producer: Producer,
        destination: Destination,
        stop: Stop,
        statistics: StatisticsPolicy | None = None,
        on_retry: OnRetry | None = None,
    ) -> None:
        self.store = store
        self.producer = producer
        self.destination = destination
        self.stop = stop  # set: a transaction waiting to be retried is abandoned
        self.on_retry = on_retry
        self._delivery_errors: list[str] = []
        self._statistics = StatisticsRefresh(store.engine, statistics)
        self._all_pending_due = True  # send_pending_alerts' first call sends every stream's
        self._unsent_streams: set[str] = set()  # streams whose pending alerts failed to send
        self._swept_at = time.monotonic()  # the last sweep of every stream's leftovers

    def write(self, job: WriteJob) -> float:
        """Downstream messages first, then the SQL transaction. If we crash after the messages,
        the window is redone and its messages re-sent (consumers deduplicate by stream and
        window); never the other way round. Alerts go the other way, through the outbox: stored
        pending by the transaction, sent after it (:meth:`send_pending_alerts`), so the alerts
        topic carries only what the table holds. Returns the commit's ``perf_counter()``."""
        # Serialised once, outside the transaction (which may be retried).
        blobs = {s: (arrays_to_npz(state), meta) for s, (state, meta) in job.checkpoints.items()}
        self._publish(job)
        what = "writing results"
        with_backoff(lambda: self._transaction(job, blobs), what, stop=self._reported(what))
        committed_at = time.perf_counter()
        if self.destination.alerts_topic:
            self.send_pending_alerts(_alert_streams(job.calls))
        return committed_at

    def send_pending_alerts(self, streams: Iterable[str] | None = None) -> None:
        """Send the stored alerts pending publication to this writer's alerts topic (of its
        worker's kinds) to it, oldest first, then clear their column in a transaction of their
        own: those of ``streams`` and of the streams whose sending failed before; on the first
        call every stream's (what a crash left between a commit and the sending), and every
        :data:`_SWEEP_EVERY_S` those pending for more than :data:`_LEFTOVER_AGE_S` (left by a
        writer that stopped, of a stream that raises no alert since: a writer of another process
        sends its own within a moment of its commit). A crash before the clearing sends them
        again (consumers deduplicate by ``alert_key``). A failure (the broker or the database
        down, a stop) is logged, not raised: the window is committed, and its alerts stay
        pending for the next call. An alert that cannot fit the topic is logged and not sent
        (:meth:`_alert_messages`)."""
        topic = self.destination.alerts_topic
        if topic is None:
            return
        now = time.monotonic()
        sweep = self._all_pending_due or now - self._swept_at >= _SWEEP_EVERY_S
        wanted = {*(streams or ()), *self._unsent_streams}
        selections: list[tuple[list[str] | None, float | None]] = []
        if wanted:
            selections.append((sorted(wanted), None))
        if sweep:
            selections.append((None, None if self._all_pending_due else _LEFTOVER_AGE_S))
        try:
            for selected, older_than_s in selections:
                after_id = 0
                while rows := self.store.pending_alerts(
                    topic,
                    selected,
                    self.destination.alert_kinds,
                    after_id,
                    _PENDING_BATCH,
                    older_than_s,
                ):
                    self._send_alerts(rows, topic)
                    after_id = rows[-1]["id"]
        except (*_ENVIRONMENT_ERRORS, DeliveryError) as exc:
            log.warning(
                "the committed alerts could not all be sent to %s; they stay pending and are "
                "sent with their stream's next alerts, within %d s, or at the next start: %s",
                topic,
                _SWEEP_EVERY_S,
                first_line(exc),
            )
            self._unsent_streams |= wanted
            return
        if sweep:
            self._all_pending_due, self._swept_at = False, now
        self._unsent_streams.clear()

    def _send_alerts(self, rows: list[dict[str, Any]], topic: str) -> None:
        """Send the stored alerts ``rows`` to ``topic``, wait for their delivery, then mark
        them published (retried through a database outage)."""
        for key, value, headers in self._alert_messages(rows, topic):
            self._produce(topic, key, value, headers=headers)
        self._deliver()
        ids = [row["id"] for row in rows]
        what = "marking alerts published"
        with_backoff(lambda: self.store.mark_alerts_published(ids), what, stop=self._reported(what))

    def _reported(self, what: str) -> Stop:
        """The stop for a retried ``what``, each wait before a retry told to ``on_retry``."""
        return self.stop if self.on_retry is None else ReportedStop(self.stop, what, self.on_retry)

    def poll_idle(self) -> None:
        """Between two jobs: serve the producer's callbacks (its errors and log lines, a broker
        going down while no window is written), which only a poll serves."""
        self.producer.poll(0)

    def refresh_statistics(self) -> None:
        """Between two jobs: gather SQLite's planner statistics if they are due
        (:class:`StatisticsRefresh`), in write transactions of their own. A failure is logged,
        not raised: the job before is committed, and the worker goes on without them."""
        if self.stop.is_set():
            return
        started = time.perf_counter()
        try:
            gathered = self._statistics.run()
        except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
            log.warning(
                "gathering the query planner's statistics (ANALYZE) failed; the results are "
                "stored, and it is tried again once the documents have grown further: %s",
                exc,
            )
            return
        if gathered:
            log.info(
                "gathered the query planner's statistics (ANALYZE) in %.2f s",
                time.perf_counter() - started,
            )

    def _transaction(self, job: WriteJob, blobs: dict[str, tuple[bytes, dict[str, Any]]]) -> None:
        d = self.destination
        with self.store.transaction() as tx:
            tx.check_owners(d.group_id, d.input_topic, job.owners)  # (first: see there)
            for name, args in job.calls:
                if name == "insert_alerts":
                    tx.insert_alerts(args[0], publish_to=d.alerts_topic)
                else:
                    _store_method(tx, name)(*args)
            for stream, (blob, meta) in blobs.items():
                tx.put_checkpoint(d.group_id, stream, blob, meta)
            if job.dead:
                tx.insert_dead_letters(job.dead)
            if job.offsets:
                tx.set_partition_offsets(d.group_id, d.input_topic, job.offsets)

    def _publish(self, job: WriteJob) -> None:
        d = self.destination
        for row in self._unsent_dead_letters(job.dead):
            dlq_key, payload, headers = dead_letter_message(
                row["topic"], row["partition"], row["offset"], row["reason"], row["payload"]
            )
            payload, headers = d.limits.fit(d.dlq_topic, dlq_key, payload, headers)
            self._produce(d.dlq_topic, dlq_key, payload, headers=headers)
        if d.output_topic:
            for batch in job.messages:
                for key, value in batch:
                    self._produce(d.output_topic, key.encode(), value)
        self._deliver()

    def _unsent_dead_letters(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` less the dead letters the table holds already (the same message: its
        coordinates and bytes; a topic deleted and created again reuses coordinates): a row is
        stored only after its copy reached the dead-letter topic (:meth:`write`), so a message
        refused again when it is read again (after a restart or a rebalance, from a resume
        offset held back by an open window) is not sent twice. (A transaction that fails after
        the sending sends them again: the topic is at-least-once, the table exact.) The
        database not answering, all are sent: the transaction after them waits out the outage
        (and a stop) as before."""
        if not rows:
            return rows
        keys = [
            (str(r["topic"]), int(r["partition"]), int(r["offset"]), bytes(r["payload"]))
            for r in rows
        ]
        try:
            stored = self.store.stored_dead_letters(keys)
        except TRANSIENT_DB_ERRORS as exc:
            log.info("dead letters sent without asking which are stored: %s", first_line(exc))
            return rows
        return [row for row, key in zip(rows, keys, strict=True) if key not in stored]

    def _deliver(self) -> None:
        """Wait for the delivery of the messages produced (:meth:`_flush`); raise
        :class:`DeliveryError` if any failed."""
        self._flush()
        if self._delivery_errors:
            errors, self._delivery_errors = self._delivery_errors, []
            raise DeliveryError(
                f"{len(errors)} messages could not be delivered, the first {errors[0]}"
            )

    def _alert_messages(
        self, rows: list[dict[str, Any]], topic: str
    ) -> Iterator[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
        """The message of each stored alert of ``rows`` for ``topic`` (:func:`alert_message`);
        one that cannot fit the topic is logged and left out."""
        for row in rows:
            message = alert_message(row, topic, self.destination.limits)
            if message is None:
                log.warning(
                    "%s alert %r of stream %r not published to %s: larger than %s even "
                    "without its related ids, summary and terms (it is stored)",
                    row["kind"],
                    row["subject_id"],
                    row["stream"],
                    topic,
                    self.destination.limits.message_limit(topic).name,
                )
                continue
            yield message

    def _flush(self) -> None:
        """Wait for the delivery of every message produced (the idempotent producer retries by
        itself until ``message.timeout.ms``, 5 minutes), saying every 10 s how many are left (in
        the log, and to ``on_retry``: a wait for the broker, as ``publishing results``).

        A stop request ends the wait once the broker has delivered nothing for
        ``_STALLED_S`` (it is down: a worker told to stop then waited out the whole
        ``message.timeout.ms`` instead of exiting): the undelivered messages are purged and
        :class:`RetryAbandonedError` raised, before the transaction, so nothing is committed and
        the next start sends the window again (consumers deduplicate)."""
        warned = stalled_since = time.monotonic()
        last = -1
        while (remaining := self.producer.flush(0.5)) > 0:
            now = time.monotonic()
            if remaining != last:
                last, stalled_since = remaining, now
            if self.stop.is_set() and now - stalled_since >= _STALLED_S:
                self._purge()
                raise RetryAbandonedError(
                    f"publishing results abandoned on shutdown ({remaining} messages not "
                    "delivered to Kafka)"
                )
            if now - warned >= _FLUSH_REPORT_S:
                log.warning("%d messages not yet delivered to Kafka; waiting", remaining)
                warned = now
                if self.on_retry is not None:
                    self.on_retry("publishing results", _FLUSH_REPORT_S)

    def _purge(self) -> None:
        """Drop the messages not delivered yet (abandoned: the producer's close would otherwise
        wait for them too), and their delivery errors."""
        self.producer.purge()
        self.producer.poll(0)  # (serves the purged messages' delivery reports)
        self._delivery_errors = []

    def _produce(self, topic: str, key: bytes, value: bytes, **kwargs: Any) -> None:
        """Hand one message to the producer. A refusal at the hand-over (librdkafka already
        knows the topic refuses it: an authorization error seen in a delivery report or in
        the metadata, a message too large) is a delivery error like one reported later:
        :meth:`_deliver` raises :class:`DeliveryError` for both, which of the two a refused
        message meets depending only on how soon the producer learned of the refusal."""
        try:
            produce(
                self.producer,
                topic,
                key,
                value,
                0.5,
                stop=self.stop,
                on_delivery=self._delivered,
                **kwargs,
            )
        except RetryAbandonedError:
            self._purge()
            raise
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            self._delivery_errors.append(f"to {topic}: {KafkaError(error.code()).str()}")

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._delivery_errors.append(f"to {msg.topic()}: {err.str()}")

    def close(self) -> None:
        self.producer.flush(30)


def _alert_streams(calls: list[StoreCall]) -> set[str]:
    """The streams of the alerts of the ``insert_alerts`` calls of ``calls``."""
    alert_calls = (args for name, args in calls if name == "insert_alerts")
    return {str(row["stream"]) for args in alert_calls for row in args[0]}


def _store_method(tx: StoreTx, name: str) -> Any:
    if name not in _STORE_CALLS:
        raise ValueError(f"{name!r} is not a result write of StoreTx")
    return getattr(tx, name)


def alert_object(row: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON object of an ``insert_alerts`` row: the fields the alerts table stores, as it
    stores them (``event_time`` in ISO 8601 UTC ending in ``Z``), a NaN or infinite number as
    null, and null for what an alert lacks (an anomaly has no terms, document count or related
    ids; an alert without an event time)."""
    terms, related = row.get("terms"), row.get("related_ids")
    return {
        "kind": str(row["kind"]),
        "stream": str(row["stream"]),
        "subject_id": str(row["subject_id"]),
        "score": _json_number(row["score"]),
        "window_seq": int(row["window_seq"]),
        "event_time": _iso_utc(row["event_time"]),
        "summary": str(row["summary"]),
        "terms": None if terms is None else [[str(t), _json_number(w)] for t, w in terms],
        "n_documents": opt_int(row.get("n_documents")),
        "related_ids": None if related is None else [str(i) for i in related],
    }


def alert_message(
    row: Mapping[str, Any], topic: str, limits: TopicLimits
) -> tuple[bytes, bytes, list[tuple[str, bytes]]] | None:
    """The message of an ``insert_alerts`` row for ``topic``: key the stream (a stream's alerts
    stay in order on one partition), value :func:`alert_object` as UTF-8 JSON with sorted keys,
    header :data:`ALERT_KEY_HEADER`; cut to fit ``limits`` (:func:`_cut_alert`), ``None`` when
    it cannot."""
    alert = alert_object(row)
    key = alert["stream"].encode()
    headers = [(ALERT_KEY_HEADER, alert_key(alert))]
    value = _encode_alert(alert)
    if len(value) <= limits.value_room(topic, key, headers):
        return key, value, headers
    cut = _cut_alert(alert, headers, lambda h: limits.value_room(topic, key, h))
    return None if cut is None else (key, *cut)


def alert_key(alert: Mapping[str, Any]) -> bytes:
    """The :data:`ALERT_KEY_HEADER` of ``alert``: ``["kind","stream","subject_id"]``, compact
    UTF-8 JSON."""
    return _ALERT_ENCODER.encode([alert["kind"], alert["stream"], alert["subject_id"]]).encode()


def _cut_alert(
    alert: dict[str, Any],
    headers: list[tuple[str, bytes]],
    room: Callable[[list[tuple[str, bytes]]], int],
) -> tuple[bytes, list[tuple[str, bytes]]] | None:
    """``alert`` (changed in place) as small as its message must be, with ``room(headers)``
    value bytes: without its related ids (its ``n_documents`` still counts them), then with its
    summary shortened as much as needed, then without its terms, until it fits; a
    :data:`TRUNCATED_HEADER` names what it lost. ``None`` when nothing of that makes it fit."""
    lost: list[str] = []
    for name in _ALERT_CUTS:
        if not alert[name]:
            continue  # nothing to cut
        lost.append(name)
        cut_headers = [*headers, (TRUNCATED_HEADER, ",".join(lost).encode())]
        limit = room(cut_headers)
        alert[name] = _shortened_summary(alert, limit) if name == "summary" else None
        value = _encode_alert(alert)
        if len(value) <= limit:
            return value, cut_headers
    return None


def _shortened_summary(alert: dict[str, Any], limit: int) -> str:
    """The longest start of ``alert``'s summary, ended by "…", with which the alert encodes in
    ``limit`` bytes; ``""`` when none does (a binary search: the encoded size grows with it)."""
    summary = alert["summary"]

    def start(n: int) -> str:
        return summary[:n] + "…" if n else ""

    def fits(n: int) -> bool:
        return len(_encode_alert({**alert, "summary": start(n)})) <= limit

    low, high = 0, len(summary) - 1  # the longest fitting start is in [low, high]
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return start(low)


def _encode_alert(alert: dict[str, Any]) -> bytes:
    return _ALERT_ENCODER.encode(alert).encode()


def _json_number(value: Any) -> float | None:
    """``value`` as a JSON number: ``None`` for a missing, NaN or infinite one."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _iso_utc(value: datetime | None) -> str | None:
    """An aware datetime in ISO 8601 UTC with microseconds, ending in ``Z``."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class ThreadWriter:
    """Runs jobs on one thread of this process (the loop's store, a producer of its own);
    ``on_retry`` is called on that thread."""

    def __init__(
        self,
        store: Store,
        destination: Destination,
        name: str,
        statistics: StatisticsPolicy | None = None,
        on_retry: OnRetry | None = None,
    ) -> None:
        self._stop = threading.Event()
        producer = make_producer(destination.bootstrap, **destination.limits.producer_settings())
        self._writer = ResultWriter(store, producer, destination, self._stop, statistics, on_retry)
        self._pool = ThreadPoolExecutor(1, initializer=_name_thread, initargs=(f"{name}-writer",))
        self._pool.submit(self._writer.send_pending_alerts)  # what a crash left, before any job
        self._closing = threading.Event()
        self._idle_poller = threading.Thread(
            target=self._poll_while_idle, name=f"{name}-writer-idle", daemon=True
        )
        self._idle_poller.start()

    def _poll_while_idle(self) -> None:
        """Every :data:`_IDLE_POLL_S`, a poll of the producer on the writer's thread
        (:meth:`ResultWriter.poll_idle`), queued behind the job in flight and at most one at a
        time, until :meth:`close`."""
        polled: Future[None] | None = None
        while not self._closing.wait(_IDLE_POLL_S):
            if polled is None or polled.done():
                try:
                    polled = self._pool.submit(self._writer.poll_idle)
                except RuntimeError:  # (shut down)
                    return

    def submit(self, job: WriteJob) -> Pending:
        # The checkpoints' arrays are the models' own: copied before the models move on.
        checkpoints = {
            stream: ({k: np.array(v, copy=True) for k, v in state.items()}, dict(meta))
            for stream, (state, meta) in job.checkpoints.items()
        }
        job = dataclasses.replace(job, checkpoints=checkpoints)
        future = self._pool.submit(self._writer.write, job)
        self._pool.submit(self._refresh_after, future)  # before the next job, after its answer
        return _ThreadPending(future)

    def raise_if_gone(self) -> None:
        """(A thread of this process: it cannot die on its own.)"""

    def _refresh_after(self, job: Future[float]) -> None:
        """The planner statistics' refresh after ``job`` (done: this thread ran it), if it
        committed."""
        if job.exception() is None:
            self._writer.refresh_statistics()

    def abandon_retries(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Wait for the job in flight (its error, if any, is left to its ``result``)."""
        self._closing.set()
        self._idle_poller.join()
        self._pool.shutdown(wait=True)
        self._writer.close()


class _ThreadPending:
    def __init__(self, future: Future[float]) -> None:
        self._future = future

    def result(self) -> float:
        try:
            return self._future.result()
        except PartitionsFencedError:
            raise
        except Exception as exc:  # the same error as from the process writer
            raise WriterError(f"{type(exc).__name__}: {exc}") from exc

    def ready(self) -> bool:
        return self._future.done()


class _ProcessPending:
    def __init__(self, writer: ProcessWriter) -> None:
        self._writer = writer
        self._outcome: tuple[str, Any] | None = None

    def result(self) -> float:
        if self._outcome is None:
            self._outcome = self._writer._receive()
        status, value = self._outcome
        if status == "fenced":
            raise PartitionsFencedError(*value)
        if status != "ok":
            message, child_traceback = value
            error = WriterError(message)
            error.add_note(f"in the writer process of {self._writer.name}:\n{child_traceback}")
            raise error
        return float(value)

    def ready(self) -> bool:
        return self._outcome is not None or self._writer._answered()


class ProcessWriter:
    """Runs jobs in a child process with its own store connection and producer.

    The child is a fresh interpreter (``python -c``, not ``multiprocessing``'s spawn, which
    re-imports the parent's ``__main__``) talking over an inherited socket pair; the database URL
    travels over the socket, not the command line."""

    def __init__(
        self,
        database_url: str,
        destination: Destination,
        name: str,
        statistics: StatisticsPolicy | None = None,
        on_retry: OnRetry | None = None,
    ) -> None:
        parent_sock, child_sock = socket.socketpair()
        fd = child_sock.fileno()
        command = f"from sparsewatch.consumers.writer import serve; serve({fd})"
        # The child starts with SIGUSR1, SIGINT and SIGTERM blocked (a signal mask survives
        # exec) and unblocks them once its handlers are in place: an abandon sent while it still
        # started up killed it (SIGUSR1's default action), and so did a Ctrl-C in the terminal,
        # which signals the whole process group (a KeyboardInterrupt traceback from the child,
        # then the worker failed: "the writer process ... is gone").
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _CHILD_SIGNALS)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", command], pass_fds=(fd,), stdin=subprocess.DEVNULL
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            child_sock.close()
        self.name = name
        self._conn = Connection(parent_sock.detach())
        level = logging.getLogger().level
        self._conn.send((database_url, destination, os.getpid(), level, statistics, name))
        self._on_retry = on_retry
        self._pending: _ProcessPending | None = None
        self._answer: tuple[str, Any] | None = None  # the job in flight's, read by _answered
        self._in_flight = False  # a job sent and not answered yet (also while being waited for)
        self._abandoning = False  # abandon_retries was called: it holds for every later job

    def submit(self, job: WriteJob) -> Pending:
        if self._pending is not None:
            self._pending.result()  # at most one job in flight (the loop waits anyway)
        # In flight before it is sent, and the abandon flag read after: a stop (another thread,
        # or a signal handler) landing anywhere in between signals the child at least once. It
        # was marked after the send, and a stop between the two sent nothing: the job then
        # waited out a database outage (up to 120 s); so did a job submitted after the stop.
        self._in_flight = True
        try:
            self._conn.send(job)
        except OSError as exc:
            self._in_flight = False
            raise WriterError(f"the writer process of {self.name} is gone ({exc})") from None
        self._pending = _ProcessPending(self)
        if self._abandoning:
            self._signal_abandon()
        return self._pending

    def abandon_retries(self) -> None:
        """Tell the child to abandon a transaction waiting to be retried (SIGUSR1), now and for
        every later job, as the thread writer's stop event does: a job in flight, also while the
        loop waits for that job's answer, which is where a SIGTERM finds it during a database
        outage, and the child's sending of the alerts left pending before its first job
        (a broker that takes none held the worker's exit for ``message.timeout.ms``);
        :meth:`submit` sends it again with each later job."""
        self._abandoning = True
        self._signal_abandon()

    def raise_if_gone(self) -> None:
        """Raise :class:`WriterError` if the child has died (the OOM killer, a ``kill -9``) with
        no job in flight: one ``waitpid``, cheap enough for every batch of the loop. The worker
        then stops at once; it went on reading (nothing committed, nothing lost) and looked
        healthy until its next transaction found the child gone, a whole window later."""
        if not self._in_flight and self._process.poll() is not None:
            raise self._died()

    def _died(self) -> WriterError:
        code = self._process.returncode
        return WriterError(f"the writer process of {self.name} died (exit code {code})")

    def _signal_abandon(self) -> None:
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signal.SIGUSR1)

    def _answered(self) -> bool:
        """Whether the child answered the job in flight, or died (nothing to wait for then);
        its retry reports read so far go to ``on_retry``."""
        try:
            while self._answer is None and self._conn.poll(0):
                self._take(self._conn.recv())
        except (EOFError, OSError):  # the socket is closed: result() raises at once
            return True
        return self._answer is not None or self._process.poll() is not None

    def _take(self, message: tuple[Any, ...]) -> None:
        """A message of the child: a retry report (to ``on_retry``) or the job's answer."""
        if message[0] == "retrying":
            if self._on_retry is not None:
                self._on_retry(message[1], message[2])
        else:
            self._answer = (message[0], message[1])

    def _receive(self) -> tuple[str, Any]:
        self._pending = None
        try:
            while self._answer is None:
                if self._conn.poll(1.0):
                    self._take(self._conn.recv())
                elif self._process.poll() is not None:
                    raise self._died()
            answer, self._answer = self._answer, None
            return answer
        except (EOFError, OSError) as exc:
            raise WriterError(f"the writer process of {self.name} is gone ({exc})") from None
        finally:
            self._in_flight = False

    def close(self) -> None:
        """Wait for the job in flight, then let the child finish and exit."""
        pending, self._pending = self._pending, None
        if pending is not None:
            # Its error was already raised to the loop, or the loop is unwinding from another.
            with contextlib.suppress(WriterError, PartitionsFencedError):
                pending.result()
        with contextlib.suppress(OSError):
            self._conn.send(None)
        self._conn.close()
        try:
            self._process.wait(60)
        except subprocess.TimeoutExpired:
            log.warning("the writer process of %s did not exit; killing it", self.name)
            self._process.kill()
            self._process.wait()


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the parent dies (Linux), and exit if it already has."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


def _name_thread(name: str) -> None:
    """Name the calling thread: the ``thread`` of its log lines (:class:`JsonLines`)."""
    threading.current_thread().name = name


def _failure(exc: Exception) -> tuple[str, str]:
    """A failed job's one-line error (what the parent raises) and traceback, logged here with
    the traceback: at DEBUG what the runner reports in one line as the environment's (a stop, a
    database or broker outage that outlasted its retries), at ERROR anything else (a bug, whose
    traceback only this process has: the parent sees the line)."""
    level = logging.DEBUG if isinstance(exc, _ENVIRONMENT_ERRORS) else logging.ERROR
    log.log(
        level,
        "writing results failed, nothing of them committed: %s: %s",
        type(exc).__name__,
        first_line(exc),
        exc_info=exc,
    )
    return f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))


def serve(fd: int) -> None:
    """The writer process (started by :class:`ProcessWriter`): read its settings, then perform
    jobs from the socket ``fd`` until it closes, answering each with ``("ok", committed_at)``,
    ``("fenced", ...)`` or ``("error", (message, traceback))``, after a ``("retrying", what,
    seconds)`` for each wait before a retry of its transaction; after a job's answer, the planner
    statistics' refresh (:meth:`ResultWriter.refresh_statistics`), while the loop computes the
    next window. Its log lines' ``thread`` is ``<worker>-writer``."""
    # Checkpoints (arrays and their npz, megabytes, growing with the model) go back to the
    # system when done; the per-window result rows (around a megabyte) stay on the heap:
    # mapping them costs page faults on every job.
    map_large_allocations(8 << 20)
    conn = Connection(fd)
    database_url, destination, parent_pid, log_level, statistics, name = conn.recv()
    _name_thread(f"{name}-writer")
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stop = StopFlag()
    signal.signal(signal.SIGUSR1, stop.request)  # ProcessWriter.abandon_retries
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _CHILD_SIGNALS)  # (blocked by the parent)
    setup_logging(log_level)
    store = Store.open(database_url, upgrade=False)
    producer = make_producer(destination.bootstrap, **destination.limits.producer_settings())

    def report(what: str, seconds: float) -> None:
        with contextlib.suppress(OSError):  # (a parent gone: this process dies with it)
            conn.send(("retrying", what, seconds))

    writer = ResultWriter(store, producer, destination, stop, statistics, report)
    try:
        writer.send_pending_alerts()  # what a crash left, before any job
        while True:
            while not conn.poll(_IDLE_POLL_S):  # (the producer's errors and logs as they come)
                writer.poll_idle()
            try:
                job = conn.recv()
            except EOFError:
                break
            if job is None:
                break
            try:
                answer: tuple[str, Any] = ("ok", writer.write(job))
            except PartitionsFencedError as exc:  # (not a failure: the loop goes on without them)
                answer = ("fenced", (exc.group, exc.topic, sorted(exc.partitions)))
            except Exception as exc:  # the parent raises it; nothing of the job was committed
                answer = ("error", _failure(exc))
            conn.send(answer)
            if answer[0] == "ok":
                writer.refresh_statistics()
    finally:
        writer.close()
        store.dispose()


def make_writer(
    mode: str,
    store: Store,
    destination: Destination,
    name: str,
    statistics: StatisticsPolicy | None = None,
    on_retry: OnRetry | None = None,
) -> Writer:
    """A :class:`ProcessWriter` or :class:`ThreadWriter` for ``mode``; an in-memory SQLite
    database always gets the thread (another process cannot open it). ``statistics``: when it
    gathers SQLite's planner statistics (default: :class:`StatisticsPolicy`'s); ``on_retry``:
    told of each wait before a retried transaction, on the thread that waits for or polls the
    job (process) or on the writer's thread. Its messages fit
    the output, dead-letter and alerts topics' limits, read here (see the module doc): a
    dead-letter topic too small for dead letters is a SparsewatchError."""
    if mode not in WRITER_MODES:
        raise ValueError(f"writer must be one of {', '.join(WRITER_MODES)}, not {mode!r}")
    topics = (destination.output_topic, destination.dlq_topic, destination.alerts_topic)
    written = [t for t in topics if t]
    limits = TopicLimits.read(destination.bootstrap, written)
    limits.check_dead_letter_topic(destination.dlq_topic)
    destination = dataclasses.replace(destination, limits=limits)
    if mode == "thread" or is_in_memory_sqlite(store.engine.url):
        return ThreadWriter(store, destination, name, statistics, on_retry)
    url = store.engine.url.render_as_string(hide_password=False)
    return ProcessWriter(url, destination, name, statistics, on_retry)
