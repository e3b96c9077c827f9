"""Shutdown of the write-behind writer while the broker is down (``consumers/writer.py``).

A worker told to stop (SIGTERM) while its writer waited for the broker to acknowledge a window's
messages waited out librdkafka's whole ``message.timeout.ms`` (5 minutes) before it could exit:
the stop abandoned only a transaction waiting to be retried, never the delivery before it. The
undelivered messages are now dropped and nothing is committed (the next start sends them again);
a broker that answers is still waited for.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import produce
from sparsewatch.consumers.retry import RetryAbandonedError
from sparsewatch.consumers.writer import Destination, WriteJob, WriterError, make_writer
from sparsewatch.storage.store import Store

from sparsewatch.kafka_local import free_ports
from tests.support.writer_jobs import OutcomeWaiter


def _job() -> WriteJob:
    dead = {"topic": "t", "partition": 0, "offset": 7, "reason": "invalid JSON", "payload": b"{"}
    return WriteJob(dead=[dead], offsets={0: 8})


def _dead_destination() -> Destination:
    """Topics on a port where no broker listens (the broker is down)."""
    bootstrap = f"127.0.0.1:{free_ports(1)[0]}"
    return Destination(bootstrap, "g", "x.docs", "x.scores", "x.dlq")


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_a_stop_abandons_a_job_waiting_for_a_broker_that_is_down(tmp_path: Path, kind: str) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'w.db'}")
    writer = make_writer(kind, store, _dead_destination(), "test")
    try:
        pending = writer.submit(_job())
        time.sleep(1.5)  # the job waits for its dead letter's delivery
        assert not pending.ready()
        waiter = OutcomeWaiter(pending)
        t0 = time.monotonic()
        writer.abandon_retries()
        outcome = waiter.outcome(20)
        assert outcome is not None, "the job still waits for the broker after the stop"
        assert time.monotonic() - t0 < 5.0
        assert isinstance(outcome, WriterError)
        assert "publishing results abandoned on shutdown" in str(outcome)
        t0 = time.monotonic()
    finally:
        writer.close()
    try:
        assert time.monotonic() - t0 < 5.0, "closing waited for the abandoned messages"
        assert store.dead_letters(limit=None) == []  # nothing committed
        assert store.partition_offsets("g", "x.docs") == {}
    finally:
        store.dispose()


def test_a_stop_does_not_abandon_a_job_the_broker_acknowledges(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Only a stalled delivery is abandoned: with the broker up, the job in hand commits."""
    prefix = f"review-ops-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, {f"{prefix}.dlq": 1})
    dest = Destination(kafka_bootstrap, "g", f"{prefix}.docs", None, f"{prefix}.dlq")
    store = Store.open(f"sqlite:///{tmp_path / 'w.db'}")
    writer = make_writer("thread", store, dest, "test")
    try:
        writer.abandon_retries()  # the stop came first: the job is still delivered and stored
        writer.submit(_job()).result()
    finally:
        writer.close()
    try:
        assert len(store.dead_letters(limit=None)) == 1
        assert store.partition_offsets("g", f"{prefix}.docs") == {0: 8}
    finally:
        store.dispose()


def test_a_stop_ends_the_wait_for_room_in_a_full_producer_queue() -> None:
    port = free_ports(1)[0]
    producer = Producer(
        {"bootstrap.servers": f"127.0.0.1:{port}", "queue.buffering.max.messages": 1}
    )
    stop = threading.Event()
    produce(producer, "x", b"k", b"v", stop=stop)  # fills the queue
    stop.set()
    t0 = time.monotonic()
    with pytest.raises(RetryAbandonedError, match="producer's queue is full"):
        produce(producer, "x", b"k", b"v", stop=stop)
    assert time.monotonic() - t0 < 2.0
    producer.purge()
