"""Log lines while the Kafka broker is down (a broker of the test's own, killed and started again).

With every broker down, librdkafka 2.16 re-bootstraps after each failed connection attempt: the
new bootstrap broker starts its reconnect backoff afresh, and is tried again 50 ms later (half
the default ``reconnect.backoff.ms``). A consumer logged ``Connection refused`` some 20 times a
second, which ``BatchConsumer._on_error`` repeated as warnings, and each producer 2 to 3 times a
second: about 740 lines in 10 s under ``sparsewatch run all``. Now each failure is logged once
(again, with its count, if it goes on for a minute), the consumer says at INFO when the broker
answers again, and the consumer still resumes within about a second of the broker's return.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import BatchConsumer, log, make_producer, produce
from sparsewatch.consumers.kafka_connection_failures import ConnectionFailures

from sparsewatch.kafka_local import LocalKafka
from sparsewatch.logs import RDKAFKA_LOGGER

OUTAGE_S = 10.0
LOGGERS = {RDKAFKA_LOGGER.name, log.name}


def _client(record: logging.LogRecord) -> str:
    """Which client a line is of: librdkafka's name for it, or ``consumer`` (our warnings)."""
    if record.name == RDKAFKA_LOGGER.name:
        return str(record.args[1]) if isinstance(record.args, tuple) else "?"
    return "consumer"


class _Reader:
    """A consumer of ``topic`` and a producer, both polled on a thread of their own."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.consumer = BatchConsumer(bootstrap, f"{topic}-group", [topic])
        self.producer = make_producer(bootstrap)
        self.read: list[tuple[float, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for msg in self.consumer.poll_batch(100, timeout=0.1):
                self.read.append((time.time(), msg.value()))
            self.producer.poll(0)

    def send_and_wait(self, value: bytes, timeout_s: float) -> float:
        """Produce ``value``; the time it was read at."""
        produce(self.producer, self.topic, b"k", value)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            read = [at for at, v in self.read if v == value]
            if read:
                return read[0]
            time.sleep(0.02)
        raise AssertionError(f"{value!r} not read within {timeout_s} s")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()
        self.producer.flush(10)


def test_a_broker_outage_is_logged_in_a_few_lines_and_its_end_at_info(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A consumer and a producer while their broker is killed and, 10 s later, started again
    (which takes it another 10 to 20 s here): a handful of lines in all, not 40 a second; the
    failure is in them, the broker's return is said at INFO, and a message produced once the
    broker is back is read within a few seconds."""
    broker_dir = tmp_path / "broker"
    bootstrap = LocalKafka(broker_dir, port=0).up()
    port = int(bootstrap.rsplit(":", 1)[1])
    topic = f"outage-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: 1})
    reader = _Reader(bootstrap, topic)
    try:
        with caplog.at_level(logging.INFO):
            reader.send_and_wait(b"before", 60)
            killed_at = time.time()
            LocalKafka(broker_dir, port=port).kill()
            time.sleep(OUTAGE_S)
            LocalKafka(broker_dir, port=port).up()
            up_at = time.time()
            resume_s = reader.send_and_wait(b"after", 60) - up_at
            time.sleep(2.0)  # (the consumer's next statistics)
    finally:
        reader.close()
        LocalKafka(broker_dir, port=port).kill()
    ours = [r for r in caplog.records if r.name in LOGGERS and r.created >= killed_at]
    down = [r for r in ours if r.created < up_at and r.levelno >= logging.WARNING]
    per_client = Counter(_client(r) for r in down)
    summary = (
        f"{len(down)} lines in {up_at - killed_at:.1f} s: {dict(per_client)}; "
        f"read {resume_s:.2f} s after the broker's return"
    )
    print(summary, *(r.getMessage()[:200] for r in ours), sep="\n  ")
    assert any("Connection refused" in r.getMessage() for r in down), summary
    assert len(down) <= 12, summary + "\n" + "\n".join(r.getMessage()[:160] for r in down[:30])
    assert all(n <= 5 for n in per_client.values()), summary
    back = [r for r in ours if r.levelno == logging.INFO and "answers again" in r.getMessage()]
    assert back and back[0].created >= killed_at + OUTAGE_S, summary
    assert resume_s < 5.0, summary


def test_a_failure_that_goes_on_is_logged_again_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A real producer with no broker at its address (librdkafka tries it about every 0.5 s),
    its failures said again every 2 s: its ``Connection refused`` line once, then with the count
    of the repeats not logged."""
    failures = ConnectionFailures(repeat_after_s=2.0)
    producer = make_producer("127.0.0.1:1", logger=failures)
    with caplog.at_level(logging.INFO, logger=RDKAFKA_LOGGER.name):
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            producer.poll(0.1)
    lines = [r.getMessage() for r in caplog.records if r.name == RDKAFKA_LOGGER.name]
    refused = [line for line in lines if "Connection refused" in line]
    assert 2 <= len(refused) <= 3, lines
    assert "more time(s) since it was last logged" not in refused[0], lines
    assert all("more time(s) since it was last logged" in line for line in refused[1:]), lines


def _line(failures: ConnectionFailures, level: int, facility: str, text: str) -> None:
    """A librdkafka line of client ``c``, as the client hands it to its ``logger``."""
    failures.log(level, "%s [%s] %s", facility, "c", text)


def test_other_lines_and_errors_are_never_held_back(caplog: pytest.LogCaptureFixture) -> None:
    """Only the repeats of a connection failure are counted instead of logged: a different
    failure, another facility's line, a CRITICAL line, a fatal error and an error that is not a
    connection failure are logged every time; the consumer's error that reports a failure already
    logged as librdkafka's line is not logged again."""
    failures = ConnectionFailures()
    refused = "[thrd:h:9/1]: h:9/1: Connect to ipv4#127.0.0.1:9 failed: Connection refused"
    with caplog.at_level(logging.INFO):
        for after_ms in (0, 1, 7):
            _line(failures, logging.ERROR, "FAIL", f"{refused} (after {after_ms}ms in state UP)")
        for _ in range(2):
            _line(failures, logging.ERROR, "FAIL", "[thrd:h:9/1]: h:9/1: SSL handshake failed")
            _line(failures, logging.WARNING, "SESSTMOUT", "session timed out")
            _line(failures, logging.CRITICAL, "FAIL", "[thrd:x]: x: out of memory")
    assert Counter(r.getMessage() for r in caplog.records) == {
        f"FAIL [c] {refused} (after 0ms in state UP)": 1,
        "FAIL [c] [thrd:h:9/1]: h:9/1: SSL handshake failed": 1,
        "SESSTMOUT [c] session timed out": 2,
        "FAIL [c] [thrd:x]: x: out of memory": 2,
    }

    consumer = BatchConsumer("127.0.0.1:1", f"nobroker-{uuid.uuid4().hex[:8]}", ["t"])
    caplog.clear()
    logged = "b:1/1: Connect to b failed: refused"
    unlogged = "b:1/1: Failed to resolve 'b:1': Name or service not known"
    try:
        with caplog.at_level(logging.INFO, logger=log.name):
            _line(consumer._failures, logging.ERROR, "FAIL", f"[thrd:b:1/1]: {logged}")
            for after_ms in (0, 3, 9):
                for failure in (logged, unlogged):
                    text = f"{failure} (after {after_ms}ms in state CONNECT)"
                    consumer._on_error(KafkaError(KafkaError._TRANSPORT, text))
                consumer._on_error(KafkaError(KafkaError._MAX_POLL_EXCEEDED, "poll interval"))
                consumer._on_error(KafkaError(KafkaError._FATAL, "fenced", fatal=True))
            said = Counter(
                r.getMessage().split('str="')[-1] for r in caplog.records if r.name == log.name
            )
    finally:
        consumer.close()  # (serves the client's own failures meanwhile: not counted)
    assert said == {
        f'{unlogged} (after 0ms in state CONNECT)"}}': 1,
        'poll interval"}': 3,
        'fenced"}': 3,
    }
