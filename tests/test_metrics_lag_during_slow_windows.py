"""``sparsewatch_consumer_lag`` while a backlog's windows take longer than the keep-alive delay.

While the keep-alive helper polls (a batch's work longer than ``min(5 s, max.poll.interval.ms /
4)``: a day's window of a busy stream), the consumer's lag is unknown, and the worker set the
gauge to the sum of the known lags: 0. On a backlog of such windows the gauge read 0 after every
batch, exactly when the worker was furthest behind. An unknown lag now keeps its last known value.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sparsewatch.consumers.metrics import IngestMetrics, WorkerMetrics
from sparsewatch.consumers.processor import Output

from tests.support.worker_stubs import (
    OneStreamProcessor,
    QuietState,
    consumer_lag,
    running_on_backlog,
)

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
    processor = _SlowProcessor()
    samples: list[float | None] = []
    with running_on_backlog(
        processor,
        kafka_bootstrap,
        tmp_path / "lag.db",
        40,
        poll_batch=2,  # a batch of two windows: longer than the keep-alive delay
        consumer_overrides=KEEPALIVE,
    ):
        deadline = time.monotonic() + 60
        while not consumer_lag(processor.name) and time.monotonic() < deadline:
            time.sleep(0.1)  # the first batch's lag
        for _ in range(16):  # two batches of the backlog, well before its end
            time.sleep(0.5)
            samples.append(consumer_lag(processor.name))
    assert all(s is not None and s > 0 for s in samples), samples


def test_an_unknown_lag_keeps_the_last_known_one() -> None:
    metrics = WorkerMetrics(f"lag-unit-{uuid.uuid4().hex[:6]}")
    metrics.set_lag({("t", 0): 120, ("t", 1): 3})
    metrics.set_lag({("t", 0): None, ("t", 1): 5})  # partition 0 unknown (keep-alive polling)
    assert consumer_lag(metrics.worker) == 125
    metrics.set_lag({("t", 1): 0})  # partition 0 revoked
    assert consumer_lag(metrics.worker) == 0


def test_the_ingest_bridge_keeps_an_unknown_lag_at_its_last_known_value() -> None:
    """The bridge's gauge (``worker="ingest"``) left a partition of unknown lag out: it fell by
    that partition's lag whenever its lag was unknown (the broker not answering)."""
    metrics = IngestMetrics()
    metrics.set_lag({("src", 0): 40, ("src", 1): 7})
    metrics.set_lag({("src", 0): None, ("src", 1): 2})
    assert consumer_lag("ingest") == 42
    metrics.set_lag({("src", 1): 1})  # partition 0 revoked
    assert consumer_lag("ingest") == 1
