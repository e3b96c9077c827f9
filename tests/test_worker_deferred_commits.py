"""Windows that close while a transaction is in flight go together in the next transaction.

The loop handed every closed window to the writer at once, in a transaction of its own: with
thousands of streams whose windows close in the same batch, each one waited for the transaction
before it and computed the resume offsets over every stream (measured: 2,000 streams x 20
documents made 2,039 transactions). Windows closing while a transaction is in flight now wait in
the loop and go together in the next one; with none in flight a window is still handed over at once.

The tests drive :meth:`WorkerLoop._process` with constructed messages of the anomaly worker's
input (a real broker for the topics and the writer's producer, real SQLite files). The store
counts its transactions and, gated, holds each one until the loop waits for it: a transaction
stays in flight for as long as the loop does not need it, the extreme of transactions slower than
windows, made deterministic. The reference run feeds one message per batch and waits for each
transaction: every window is committed alone.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from sparsewatch.consumers.memory import FreeHeapBound
from sparsewatch.consumers.writer import (
    WriterError,
)
from sparsewatch.storage.schema import metadata
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from tests.support.anomaly_worker import scores_message
from tests.support.gated_writer import (
    CountingStore,
    WorkerInput,
    feed,
    finish,
    open_counting,
    run_through,
)
from tests.support.storage import dump

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STREAMS = 30
WINDOWS = 4  # per stream
DOCS = 5  # per window
BATCH = 200  # messages
GARBAGE_EVERY = 41  # a message that is no scores message (a dead letter) every so many


@dataclass
class _Input(WorkerInput):
    """The anomaly worker's input, ``n_garbage`` of its messages no scores message."""

    n_garbage: int


def _input(bootstrap: str) -> _Input:
    """``STREAMS`` streams of ``WINDOWS`` windows of ``DOCS`` documents, interleaved: the windows
    of one number close on consecutive messages, one per stream."""
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SPARSEWATCH_KAFKA_TOPIC_PREFIX": f"deferred-{uuid.uuid4().hex[:8]}",
            "SPARSEWATCH_KAFKA_PARTITIONS": "1",
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "1",
            "SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY": "2",
            "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "10",
            "SPARSEWATCH_ANOMALY_REFIT_EVERY_WINDOWS": "2",
        }
    )
    values = [
        (f"s{s:02d}", scores_message(f"s{s:02d}", seq, i, DOCS, tag="d"))
        for seq in range(WINDOWS)
        for i in range(DOCS)
        for s in range(STREAMS)
    ]
    at = range(GARBAGE_EVERY - 1, len(values), GARBAGE_EVERY)
    for k in reversed(at):
        values.insert(k, ("garbage", b"not a scores message"))
    topic = config.kafka.topic("scores")
    messages = [
        Message(
            topic=topic,
            partition=0,
            offset=offset,
            key=key.encode(),
            value=value,
            timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000 + offset),
        )
        for offset, (key, value) in enumerate(values)
    ]
    return _Input("anomaly", config, messages, len(at))


def _contents(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows but their surrogate keys and creation times, in a fixed order."""
    return dump(store, leave_out_columns={"id", "created_at"})


def _open(path: Path) -> CountingStore:
    return open_counting(f"sqlite:///{path}")


@pytest.fixture(scope="module")
def reference(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[_Input, dict[str, list[tuple[Any, ...]]]]:
    """The input, and what the store holds after it when every window is committed alone."""
    data = _input(kafka_bootstrap)
    store = _open(tmp_path_factory.mktemp("reference") / "reference.db")
    with store:
        run_through(data, store, data.messages, batch=1, gated=False)
        contents = _contents(store)
    assert store.transactions >= STREAMS * WINDOWS  # (one message a batch: a window a transaction)
    assert len(contents["dead_letters"]) == data.n_garbage
    # (a stream's first window only fills its reference set: its documents are not stored)
    assert len(contents["documents"]) == STREAMS * (WINDOWS - 1) * DOCS
    return data, contents


def _stored_documents(store: Store) -> set[tuple[str, str]]:
    with store.reading() as conn:
        table = metadata.tables["documents"]
        return {
            (r.stream, r.doc_id) for r in conn.execute(sa.select(table.c.stream, table.c.doc_id))
        }


def _window(message: Message) -> tuple[str, int]:
    value = json.loads(message.value())
    return value["stream"], value["window_seq"]


def _windows_closed(messages: list[Message]) -> dict[tuple[str, int], int]:
    """Per (stream, window number), the offset of the message that completes it."""
    closed: dict[tuple[str, int], int] = {}
    for m in messages:
        if m.key() != b"garbage":
            closed[_window(m)] = max(closed.get(_window(m), -1), m.offset())
    return closed


def test_windows_closing_while_a_transaction_is_in_flight_share_the_next_one(reference, tmp_path):
    """Fed in batches of 200 messages while every transaction stays in flight until the loop
    needs it, the 120 windows (30 closing on consecutive messages at a time) are written in at
    most two transactions per batch (before: one per window, 120 and more). The database ends
    exactly as when every window was committed alone."""
    data, expected = reference
    store = _open(tmp_path / "deferred.db")
    try:
        worker = data.loop(store, gated=True)
        worker.heap_bound.limit_bytes = 0  # measured after each batch that closed windows
        feed(worker, data.messages, batch=BATCH)
        worker._wait_written()
        fed = store.transactions
        heap_checks = worker.heap_bound.checks
        finish(worker)
        contents = _contents(store)
    finally:
        store.dispose()
    n_batches = -(-len(data.messages) // BATCH)
    assert fed <= 2 * n_batches, f"{fed} transactions for {STREAMS * WINDOWS} windows"
    assert contents == expected
    if FreeHeapBound.supported():  # the free heap stays bounded between batches of windows
        assert heap_checks >= n_batches - 1, heap_checks


def test_a_crash_before_the_deferred_windows_are_written_replays_them(reference, tmp_path):
    """The worker dies with the third batch's transaction in flight, which holds every window
    that batch closed (they closed while the second batch's transaction was in flight): none of
    them is stored, no stored resume offset has moved past a message the store does not reflect,
    and a restart from the stored resume offsets and checkpoints ends with exactly the database
    of a run where every window was committed alone (nothing lost, nothing twice)."""
    data, expected = reference
    path = tmp_path / "crash.db"
    upto = 3 * BATCH
    store = _open(path)
    try:
        worker = data.loop(store, gated=True)
        feed(worker, data.messages[:upto], batch=BATCH)
        store.crash_next = True
        with pytest.raises(WriterError, match="_CrashError"):
            worker._wait_written()
        assert worker._writer is not None
        worker._writer.close()
        resume = store.partition_offsets(data.group, data.topic)[0]
        stored = _stored_documents(store)
        dead = {r["offset"] for r in store.dead_letters(limit=None)}
    finally:
        store.dispose()
    closed = _windows_closed(data.messages)
    stored_windows = {(stream, int(doc_id.split("-")[0])) for stream, doc_id in stored}
    assert stored_windows == {(s, seq) for (s, seq), at in closed.items() if seq and at < 2 * BATCH}
    assert sum(2 * BATCH <= at < upto for at in closed.values()) >= STREAMS  # lost
    # the messages of every window not written, and the dead letters not written
    unreflected = [
        m.offset()
        for m in data.messages[:upto]
        if (m.offset() not in dead if m.key() == b"garbage" else closed[_window(m)] >= 2 * BATCH)
    ]
    assert min(unreflected) >= resume

    with _open(path) as store:
        run_through(data, store, data.messages[resume:], batch=BATCH, gated=False)
        contents = _contents(store)
    assert contents == expected
