"""Jobs of several windows on the detector: deferred windows, crashes, revocation and shutdown.

Windows that close while a transaction is in flight wait in the loop and go together in the next
transaction (tests/test_worker_deferred_commits.py checks that on the anomaly worker, one
partition). Here the detector's input mixes what a job of several windows can hold: several
windows of the same stream, late documents, duplicates (dead letters), malformed messages, and
end-of-stream markers (a checkpoint due with the windows they close), over two partitions. The
store holds every transaction in flight until the loop waits for it (the gated writer of
tests/test_worker_deferred_commits.py). Whatever happens meanwhile (a crash with the deferred
windows' transaction in flight, the partitions revoked or lost, a clean shutdown), the database
after a restart from the stored resume offsets and checkpoints equals that of a run committing
every window alone: nothing lost, nothing twice. Two more cases: quiet streams leaving memory
(``max_idle_streams = 0``) with their checkpoint in the transaction in flight when they speak
again, and the real loop over a backlog on the broker, stopped while windows wait.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.worker import WorkerLoop
from sparsewatch.consumers.writer import WriterError
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from sparsewatch.runner import build_worker
from tests.support.gated_writer import (
    CountingStore,
    WorkerInput,
    feed,
    finish,
    open_counting,
    run_through,
)
from tests.support.postgres_databases import postgres_database, require_postgres_server
from tests.support.storage import dump

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STREAMS = 8  # stream i on partition i % 2
WINDOWS = 5  # per stream, of WINDOW_MS
DOCS = 8  # per window
WINDOW_MS = 10_000
T0 = 1_700_000_000_000  # (event times in the past: the idle timer closes the last windows)
BATCH = 100  # messages
# Columns that differ between two runs of the same input (surrogate keys, clocks, timings).
VOLATILE = {"id", "created_at", "updated_at", "timings", "committed_at"}


def _doc(stream: str, doc_id: str, ts: int, text: str) -> bytes:
    return json.dumps({"id": doc_id, "stream": stream, "text": text, "timestamp": ts}).encode()


def _stream_values(s: int, markers: bool = False) -> list[tuple[int, bytes]]:
    """Stream ``s``'s messages with their event times (for interleaving): windows of ``DOCS``
    documents, a late document (of window 0) in window 2, the first document of window 3 again
    (a duplicate: a dead letter), a malformed message, and (even streams) an end-of-stream
    marker."""
    stream = f"s{s}"
    texts = [d["text"] for d in generate_stream(WINDOWS * DOCS + 2, kind="tweet", seed=s)]
    out: list[tuple[int, bytes]] = []
    for w in range(WINDOWS):
        for i in range(DOCS):
            ts = T0 + w * WINDOW_MS + i * (WINDOW_MS // DOCS) + s
            out.append((ts, _doc(stream, f"{w}-{i}", ts, texts[w * DOCS + i])))
        if w == 2:  # window 0 closed: a late document
            out.append((out[-1][0] + 1, _doc(stream, "late", T0 + 5 + s, texts[-1])))
        if w == 3:  # the first document of window 3 again: a duplicate
            out.append((out[-1][0] + 2, out[-DOCS][1]))
            out.append((out[-1][0] + 1, b"{not json"))
    if markers or s % 2 == 0:
        end = json.dumps({"stream": stream, "end_of_stream": True}).encode()
        out.append((out[-1][0] + 1, end))
    return out


def _short_stream_values(s: int) -> list[tuple[int, bytes]]:
    """Stream ``s``'s first two windows (with an end-of-stream marker when ``s % 4 == 0``), then,
    once the other streams have moved two windows on, a late document."""
    stream = f"s{s}"
    full = _stream_values(s)
    kept = [(ts, v) for ts, v in full if ts < T0 + 2 * WINDOW_MS]
    if s % 4 == 0:
        kept.append(
            (kept[-1][0] + 1, json.dumps({"stream": stream, "end_of_stream": True}).encode())
        )
    late = T0 + 4 * WINDOW_MS + WINDOW_MS * 4 // 5
    kept.append((late, _doc(stream, "very-late", T0 + 7 + s, "very late words")))
    return kept


def _input(bootstrap: str, short: bool = False, markers: bool = False, **extra: str) -> WorkerInput:
    config = load_config(
        env={
            **extra,
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SPARSEWATCH_KAFKA_TOPIC_PREFIX": f"s38det-{uuid.uuid4().hex[:8]}",
            "SPARSEWATCH_KAFKA_PARTITIONS": "2",
            "SPARSEWATCH_ANOMALY_ENABLED": "false",
            "SPARSEWATCH_WINDOWS_SIZE": "10s",
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "1",
            "SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY": "2",
            "SPARSEWATCH_DETECTOR_MAX_ATOMS": "40",
            "SPARSEWATCH_DETECTOR_NEW_ATOMS_PER_WINDOW": "0",
            "SPARSEWATCH_DETECTOR_SNAPSHOT_EVERY": "2",
            "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "8",
        }
    )
    timed = sorted(
        (ts, s % 2, value)
        for s in range(STREAMS)
        for ts, value in (
            _short_stream_values(s) if short and s % 2 == 0 else _stream_values(s, markers)
        )
    )
    topic = config.kafka.topic("docs")
    next_offset = [0, 0]
    messages = []
    for ts, p, value in timed:
        messages.append(
            Message(
                topic=topic,
                partition=p,
                offset=next_offset[p],
                key=b"k",
                value=value,
                timestamp=(TIMESTAMP_CREATE_TIME, ts),
            )
        )
        next_offset[p] += 1
    return WorkerInput("detector", config, messages)


def _contents(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    # (what a run leaves in checkpoints and partition_offsets depends on where it stopped)
    left_out = {"checkpoints", "partition_offsets"}
    return dump(store, leave_out_columns=VOLATILE, leave_out_tables=left_out)


@dataclass
class _Databases:
    """Fresh databases of one kind: SQLite files or PostgreSQL databases."""

    kind: str
    folder: Path
    admin_url: str | None
    dropped_at_end: ExitStack  # the PostgreSQL databases, dropped when the module's tests end

    def fresh(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite:///{self.folder / uuid.uuid4().hex}.db"
        admin_url = require_postgres_server(self.admin_url)
        return self.dropped_at_end.enter_context(postgres_database(admin_url))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def databases(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[_Databases]:
    admin = request.getfixturevalue("postgres_admin_url") if request.param != "sqlite" else None
    with ExitStack() as stack:
        yield _Databases(request.param, tmp_path_factory.mktemp(request.param), admin, stack)


@pytest.fixture(scope="module")
def reference(kafka_bootstrap: str, databases: _Databases):
    """The input, the databases, and what the store holds after the input when every window is
    committed alone."""
    data = _input(kafka_bootstrap)
    store = open_counting(databases.fresh())
    with store:
        run_through(data, store, data.messages, batch=1, gated=False)
        contents = _contents(store)
    assert len(contents["windows"]) == STREAMS * WINDOWS
    return data, databases, contents


def _resume(store: Store, data: WorkerInput, url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Restart from the stored resume offsets and checkpoints, read to the end and go quiet."""
    offsets = store.partition_offsets(data.group, data.topic)
    store.dispose()
    rest = [m for m in data.messages if m.offset() >= offsets.get(m.partition(), 0)]
    with open_counting(url) as store:
        run_through(data, store, rest, batch=BATCH, gated=False)
        return _contents(store)


def test_deferred_windows_of_one_stream_in_one_job_store_what_single_commits_store(reference):
    """Every transaction held in flight until the loop waits for it: a batch's job holds two
    windows of each stream, with its late documents, dead letters and due checkpoints."""
    data, databases, expected = reference
    store = open_counting(databases.fresh())
    with store:
        run_through(data, store, data.messages, batch=BATCH, gated=True)
        contents = _contents(store)
    assert store.transactions < len(expected["windows"])
    assert contents == expected


@pytest.mark.parametrize("after_batches", [1, 2, 3])
def test_a_crash_with_deferred_windows_in_flight_loses_nothing(reference, after_batches):
    """The worker dies with a batch's job of deferred windows in flight (it fails before
    writing anything): a restart from the stored offsets and checkpoints completes the input
    with nothing lost or stored twice."""
    data, databases, expected = reference
    url = databases.fresh()
    store = open_counting(url)
    worker = data.loop(store, gated=True)
    feed(worker, data.messages[: after_batches * BATCH], batch=BATCH)
    store.crash_next = True
    with pytest.raises(WriterError):
        worker._wait_written()
    assert worker._writer is not None
    worker._writer.close()
    assert _resume(store, data, url) == expected


def _revoke(worker: WorkerLoop, data: WorkerInput) -> None:
    worker._on_revoke([(data.topic, 0), (data.topic, 1)])


def _lose(worker: WorkerLoop, data: WorkerInput) -> None:
    worker._on_lost([(data.topic, 0), (data.topic, 1)])


def _shut_down(worker: WorkerLoop, data: WorkerInput) -> None:
    worker._wait_written()
    worker._checkpoint_dirty(set(worker._partitions))


@pytest.mark.parametrize("after_batches", [1, 3])
@pytest.mark.parametrize("how", [_revoke, _lose, _shut_down])
def test_partitions_taken_away_or_a_shutdown_with_deferred_windows_lose_nothing(
    reference, after_batches: int, how: Callable[[WorkerLoop, WorkerInput], None]
):
    """After a batch whose windows waited for the transaction in flight, the partitions are
    revoked (their dirty streams checkpointed), lost (nothing more written) or the worker shuts
    down cleanly; the next owner, starting from the stored offsets and checkpoints, completes
    the input with nothing lost or stored twice."""
    data, databases, expected = reference
    url = databases.fresh()
    store = open_counting(url)
    worker = data.loop(store, gated=True)
    feed(worker, data.messages[: after_batches * BATCH], batch=BATCH)
    worker._wait_written()  # (as each of them does first)
    store.gate_open = None  # (their own transaction is synchronous)
    how(worker, data)
    assert worker._writer is not None
    worker._writer.close()
    assert _resume(store, data, url) == expected


S_PER_MESSAGE = 0.02  # the loop's clock advances this much a message (idle after 50 messages)


def _feed_clocked(worker: WorkerLoop, messages: list[Message], batch: int) -> set[str]:
    """As :func:`~tests.support.gated_writer.feed`, the loop's clock at ``S_PER_MESSAGE`` a
    message, each partition read up to date when a batch is read (idle streams are found as the
    consumer would tell); the streams that left memory meanwhile."""
    seen: set[str] = set()
    left: set[str] = set()
    for lo in range(0, len(messages), batch):
        now = lo * S_PER_MESSAGE
        for part in worker._partitions.values():
            part.read_up_to_at = now
        worker._process(messages[lo : lo + batch], now=now)
        if batch == 1:
            worker._wait_written()
        seen |= worker.streams_in_memory
        left |= seen - worker.streams_in_memory
    return left


def test_quiet_streams_leaving_memory_while_deferred_jobs_wait_lose_nothing(
    kafka_bootstrap, databases
):
    """Half the streams stop after two windows (some with an end-of-stream marker) and, with
    ``max_idle_streams = 0``, are checkpointed and leave memory as soon as they are quiet, in the
    transaction of the windows their quiet closed; a late document of each comes back while
    that transaction may still be in flight. The database equals that of a run committing every
    window alone."""
    data = _input(kafka_bootstrap, short=True, SPARSEWATCH_MAX_IDLE_STREAMS="0")
    results = []
    for batch in (1, 30, 20):
        store = open_counting(databases.fresh())
        try:
            worker = data.loop(store, gated=batch > 1)
            dropped = _feed_clocked(worker, data.messages, batch)
            finish(worker)
            results.append(_contents(store))
        finally:
            store.dispose()
        assert dropped == {f"s{s}" for s in range(0, STREAMS, 2)}, dropped
    assert results[1] == results[0]
    assert results[2] == results[0]
    late = [r for r in results[0]["documents"] if "very-late" in r]
    assert len(late) == STREAMS // 2


class _SlowStore(CountingStore):
    """A database whose transactions take ``SLOW_S`` (windows close while one is in flight)."""

    def transaction(self):  # type: ignore[override]
        time.sleep(SLOW_S)
        return super().transaction()


# Long beside a window of DOCS documents even on a loaded machine (at 0.3 s, a run beside
# another test suite once committed each of its first windows alone).
SLOW_S = 1.0


def _run_to_end(data: WorkerInput, url: str, group: str):
    """``run()`` on the real topic until it is drained, with the thread writer, in consumer
    group ``group``."""
    store = CountingStore.open(url)
    try:
        config = dataclasses.replace(
            data.config, kafka=dataclasses.replace(data.config.kafka, group_id=group)
        )
        worker = build_worker("detector", config, store)
        worker.writer_mode = "thread"
        worker.poll_batch = 60
        worker.run(until_idle_s=2.0)
        return _contents(store)
    finally:
        store.dispose()


def produced_with_reference(
    kafka_bootstrap: str, databases: _Databases
) -> tuple[WorkerInput, dict[str, list[tuple[Any, ...]]]]:
    """The input (every stream ending with a marker, so that no window closes by the wall clock)
    produced to its topic of two partitions, and what an uninterrupted run over it stores."""
    data = _input(kafka_bootstrap, markers=True)
    ensure_topics(kafka_bootstrap, {data.topic: 2})
    producer = make_producer(kafka_bootstrap)
    for m in data.messages:
        producer.produce(data.topic, value=m.value(), partition=m.partition())
    assert producer.flush(30) == 0
    expected = _run_to_end(data, databases.fresh(), f"{data.config.kafka.group_id}-reference")
    assert len(expected["windows"]) == STREAMS * WINDOWS
    return data, expected


def test_a_stop_while_deferred_windows_wait_commits_them_or_nothing(kafka_bootstrap, databases):
    """The real loop over a backlog on the broker (every stream ends with a marker, so that
    no window closes by the wall clock), transactions slower than windows: stopped after its
    first transactions, while windows wait for the one in flight, it ends cleanly, and a
    restart completes the input with the database of an uninterrupted run."""
    data, expected = produced_with_reference(kafka_bootstrap, databases)
    url = databases.fresh()
    store = _SlowStore.open(url)
    assert isinstance(store, _SlowStore)
    try:
        worker = build_worker("detector", data.config, store)
        worker.writer_mode = "thread"
        worker.poll_batch = 60
        runner = threading.Thread(target=worker.run)
        runner.start()
        deadline = time.monotonic() + 60
        while store.transactions < 2:
            assert time.monotonic() < deadline and runner.is_alive()
            time.sleep(0.01)
        worker.stop()
        runner.join(60)
        assert not runner.is_alive()
        stopped_at = store.transactions
        stored_windows = len(store.windows(limit=None))
    finally:
        store.dispose()
    assert _run_to_end(data, url, data.config.kafka.group_id) == expected
    assert stopped_at < len(expected["windows"])
    assert stored_windows > stopped_at, "no transaction held several windows"
