"""``/readyz`` while every broker is down and the worker is busy with a batch (real broker, real
SQLite; the only stand-in is a stream state that computes until released).

Readiness came from the loop's last poll only: a worker computing a long window (or waiting for
its writer) when the broker went down answered 200 ("ready", state ``computing``) until its next
poll, minutes later, although its consumer's keep-alive helper had seen every broker down. The
probe now asks the consumer too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sparsewatch.consumers.health import Health

from sparsewatch.kafka_local import LocalKafka
from tests.support.worker_stubs import OneStreamProcessor, QuietState, running_on_backlog

pytestmark = [pytest.mark.kafka]

# The keep-alive helper polls after min(5 s, max.poll.interval.ms / 4); a session long enough
# that the member keeps its partition through the outage.
KEEPALIVE = {"session.timeout.ms": 30_000, "max.poll.interval.ms": 30_000}


class _BusyState(QuietState):
    """Its first message keeps the loop computing until ``release`` is set."""

    def __init__(self, busy: threading.Event, release: threading.Event) -> None:
        self._busy = busy
        self._release = release

    def add(self, item: Any, partition: int, offset: int, now: float) -> list[Any]:
        self._busy.set()
        self._release.wait(120)
        return []


class _BusyProcessor(OneStreamProcessor):
    name = "busy-readyz"

    def __init__(self) -> None:
        self.busy = threading.Event()
        self.release = threading.Event()

    def new_state(self, stream: str, checkpoint: Any | None) -> _BusyState:
        return _BusyState(self.busy, self.release)


def _until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {timeout:g} s"
        time.sleep(0.1)


def test_readyz_is_503_once_every_broker_is_down_while_the_worker_computes(
    tmp_path: Path,
) -> None:
    """The broker is killed while the loop computes (its keep-alive helper polling): readiness
    turns 503 with the broker's reason before the loop polls again, and 200 once the broker is
    back and the loop goes on."""
    broker = LocalKafka(tmp_path / "broker", port=0)
    port = int(broker.up().rsplit(":", 1)[1])
    health = Health(stall_s=600.0)
    processor = _BusyProcessor()
    try:
        with running_on_backlog(
            processor,
            f"127.0.0.1:{port}",
            tmp_path / "busy.db",
            1,
            poll_batch=1,
            consumer_overrides=KEEPALIVE,
            health=health.heartbeat("busy"),
        ):
            try:
                assert processor.busy.wait(60), "the message was never read"
                ready, body = health.readiness()
                assert ready and body["workers"]["busy"]["state"] == "computing", body
                broker.kill()
                _until(lambda: not health.readiness()[0], "503 while computing")
                ready, body = health.readiness()
                shown = body["workers"]["busy"]
                assert shown["state"] == "computing", body
                assert shown["reason"].startswith("the broker is unreachable"), body
                LocalKafka(tmp_path / "broker", port=port).up()
            finally:
                processor.release.set()
            _until(lambda: health.readiness()[0], "200 once the broker is back", 60.0)
    finally:
        LocalKafka(tmp_path / "broker", port=port).down()
