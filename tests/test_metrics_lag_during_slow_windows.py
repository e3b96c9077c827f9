"""``sparsewatch_consumer_lag`` while a backlog's windows take longer than the keep-alive delay.

While the keep-alive helper polls (a batch's work longer than ``min(5 s, max.poll.interval.ms /
4)``: a day's window of a busy stream), the consumer's lag is unknown, and the worker set the
gauge to the sum of the known lags: 0. On a backlog of such windows the gauge read 0 after every
batch, exactly when the worker was furthest behind. An unknown lag now keeps its last known value.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.metrics import WorkerMetrics
from sparsewatch.consumers.processor import Output
from sparsewatch.consumers.worker import WorkerLoop
from sparsewatch.storage.store import Store

from tests.support.worker_stubs import OneStreamProcessor, QuietState, consumer_lag

pytestmark = pytest.mark.kafka

WORK_S = 1.0  # each message's window, longer than the keep-alive delay below
KEEPALIVE = {"session.timeout.ms": 6000, "max.poll.interval.ms": 6000}  # helper after 1.5 s


class _SlowState(QuietState):
    """Every message closes a window that takes ``WORK_S`` to compute."""

    def add(self, item: Any, partition: int, offset: int, now: float) -> list[Output]:
        time.sleep(WORK_S)
        return [Output(n_documents=1)]


class _SlowProcessor(OneStreamProcessor):
    name = f"lag-{uuid.uuid4().hex[:6]}"

    def new_state(self, stream: str, checkpoint: Any | None) -> _SlowState:
        return _SlowState()


def test_the_lag_gauge_is_not_zero_while_slow_windows_leave_a_backlog(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"review-lag-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.docs"
    ensure_topics(kafka_bootstrap, {topic: 1})
    producer = make_producer(kafka_bootstrap)
    for i in range(40):
        producer.produce(topic, key=b"s", value=str(i).encode())
    assert producer.flush(30) == 0
    store = Store.open(f"sqlite:///{tmp_path / 'lag.db'}")
    processor = _SlowProcessor()
    worker = WorkerLoop(
        processor,
        store,
        kafka_bootstrap,
        f"{prefix}.g",
        topic,
        None,
        f"{prefix}.dlq",
        partitions=1,
        poll_batch=2,  # a batch of two windows: longer than the keep-alive delay
        checkpoint_every=1000,
        writer="thread",
        consumer_overrides=KEEPALIVE,
    )
    runner = threading.Thread(target=worker.run)
    runner.start()
    samples: list[float | None] = []
    try:
        deadline = time.monotonic() + 60
        while not consumer_lag(processor.name) and time.monotonic() < deadline:
            time.sleep(0.1)  # the first batch's lag
        for _ in range(16):  # two batches of the backlog, well before its end
            time.sleep(0.5)
            samples.append(consumer_lag(processor.name))
    finally:
        worker.stop()
        runner.join(60)
        store.dispose()
    assert all(s is not None and s > 0 for s in samples), samples


def test_an_unknown_lag_keeps_the_last_known_one() -> None:
    metrics = WorkerMetrics(f"lag-unit-{uuid.uuid4().hex[:6]}")
    metrics.set_lag({("t", 0): 120, ("t", 1): 3})
    metrics.set_lag({("t", 0): None, ("t", 1): 5})  # partition 0 unknown (keep-alive polling)
    assert consumer_lag(metrics.worker) == 125
    metrics.set_lag({("t", 1): 0})  # partition 0 revoked
    assert consumer_lag(metrics.worker) == 0
