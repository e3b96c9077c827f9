"""``sparsewatch_consumer_lag`` while a worker computes the first batch of a backlog.

The loop set the gauge from the consumer's lag only after a batch had been processed (and the
drained-input check that also sets it is skipped when a batch was read): a worker started over a
large backlog, whose first window takes seconds (the detector's warm-up), reported a lag of 0
exactly when it was furthest behind. The gauge is now set right after every non-empty poll.

While a window takes longer than the keep-alive delay, the helper keeps the partitions paused, so
no fetch brought new watermarks: the gauge stood at the lag seen before the window while messages
went on arriving (a database outage waited out: the backlog grew, the gauge did not move). The
helper now asks the brokers for the watermarks and reports the lag as it goes.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sparsewatch.consumers import kafka_client
from sparsewatch.consumers.processor import Output

from tests.support.kafka_topics import produce_messages
from tests.support.worker_stubs import (
    OneStreamProcessor,
    QuietState,
    consumer_lag,
    running_on_backlog,
)

pytestmark = pytest.mark.kafka

BACKLOG = 50
POLL_BATCH = 5
WAIT_S = 30.0


class _FirstWindowBlocks(QuietState):
    """Every message closes a window; the first one waits for ``release`` (a warm-up), after
    setting ``entered``."""

    def __init__(self, entered: threading.Event, release: threading.Event) -> None:
        self.entered = entered
        self.release = release

    def add(self, item: Any, partition: int, offset: int, now: float) -> list[Output]:
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(WAIT_S)
        return [Output(n_documents=1)]


class _Processor(OneStreamProcessor):
    """One stream whose first window blocks (see :class:`_FirstWindowBlocks`)."""

    def __init__(self) -> None:
        self.name = f"lag-first-{uuid.uuid4().hex[:6]}"
        self.entered = threading.Event()
        self.release = threading.Event()

    def new_state(self, stream: str, checkpoint: Any | None) -> _FirstWindowBlocks:
        return _FirstWindowBlocks(self.entered, self.release)


def test_the_lag_gauge_shows_the_backlog_while_the_first_batch_is_computed(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    processor = _Processor()
    with running_on_backlog(
        processor, kafka_bootstrap, tmp_path / "lag.db", BACKLOG, poll_batch=POLL_BATCH
    ) as running:
        try:
            assert processor.entered.wait(WAIT_S), "the worker read no message"
            during_first_window = consumer_lag(processor.name)
        finally:
            processor.release.set()
    assert not running.thread.is_alive()
    # (the first batch is at most POLL_BATCH messages: the rest of the backlog is still unread)
    assert during_first_window is not None
    assert BACKLOG - POLL_BATCH <= during_first_window <= BACKLOG


def test_the_lag_gauge_follows_messages_arriving_while_a_window_outlasts_the_keepalive_delay(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka_client, "KEEPALIVE_LAG_EVERY_S", 0.5)
    processor = _Processor()
    more = 40
    with running_on_backlog(
        processor,
        kafka_bootstrap,
        tmp_path / "lag.db",
        BACKLOG,
        poll_batch=POLL_BATCH,
        # the keep-alive helper pauses the partitions after 1.5 s of work
        consumer_overrides={"session.timeout.ms": 6000, "max.poll.interval.ms": 6000},
    ) as running:
        try:
            assert processor.entered.wait(WAIT_S), "the worker read no message"
            before = consumer_lag(processor.name)
            time.sleep(2.0)  # the helper polls, the partition paused
            topic = running.worker.input_topic
            produce_messages(kafka_bootstrap, topic, ((b"s", b"x") for _ in range(more)))
            deadline = time.monotonic() + 20
            while consumer_lag(processor.name) != before + more and time.monotonic() < deadline:
                time.sleep(0.1)
            during = consumer_lag(processor.name)
        finally:
            processor.release.set()
    assert before is not None and BACKLOG - POLL_BATCH <= before <= BACKLOG
    assert during == before + more  # was ``before``: the watermark stood still while paused
