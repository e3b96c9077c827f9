"""A stop asked for during a database outage is a clean stop of ``sparsewatch run``: the worker
abandons the transaction (or the checkpoint read) it was retrying, says so in one WARNING line,
and the process exits with status 0. It logged ERROR "detector worker failed: WriterError:
RetryAbandonedError: writing results abandoned on shutdown (...)", printed that as an error line
and exited 1, so that systemd or Kubernetes recorded a normal stop as a crash (a stop during a
broker outage already exited 0). A worker's real failure still exits 1. Real broker and
PostgreSQL; the outage is the ``postgres_outage`` fixture's."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sparsewatch.consumers.health import Heartbeat
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.writer import WriterError
from sparsewatch.replay.producer import replay_documents
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Store

from sparsewatch.runner import run_loops
from tests.support.cli import clean_environ

_DOCS = generate_stream(600, kind="tweet", seed=3)  # a few hours: several 1-hour windows


def _start(bootstrap: str, prefix: str, url: str, log: Path, writer: str) -> subprocess.Popen:
    """``sparsewatch run detector`` on ``prefix``'s topics (1-hour windows, ``writer`` mode), its
    stderr (the log, and the command's error line if any) appended to ``log``."""
    env = clean_environ(
        SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        SPARSEWATCH_KAFKA_TOPIC_PREFIX=prefix,
        SPARSEWATCH_KAFKA_GROUP_ID=prefix,
        SPARSEWATCH_KAFKA_PARTITIONS="1",
        SPARSEWATCH_DATABASE_URL=url,
        SPARSEWATCH_DATA_DIR=str(log.parent),
        SPARSEWATCH_WINDOWS_SIZE="1h",
        SPARSEWATCH_WRITER=writer,
    )
    with log.open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "sparsewatch", "run", "detector"], env=env, stderr=err
        )


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


def _logged(log: Path, text: str) -> Callable[[], bool]:
    return lambda: text in log.read_text()


def _stopped_cleanly(proc: subprocess.Popen, log: Path, abandoned: str) -> None:
    """SIGTERM ends ``proc`` with status 0 and one WARNING line saying ``abandoned``; no ERROR
    line, no error line from the command."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    lines = log.read_text().splitlines()
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    assert not [e for e in entries if e["level"] in ("ERROR", "CRITICAL")], lines[-5:]
    assert not [line for line in lines if line.startswith("error:")], lines[-5:]
    said = [e for e in entries if e["logger"] == "sparsewatch.runner" and "outage" in e["message"]]
    assert len(said) == 1, lines[-5:]
    assert said[0]["level"] == "WARNING"
    assert said[0]["message"].startswith(
        f"detector worker stopped during an outage: {abandoned} abandoned on shutdown ("
    )
    assert said[0]["message"].endswith(
        "; nothing of it is committed, and the next start does it again"
    )


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.parametrize("writer", ["process", "thread"])
def test_a_stop_while_a_transaction_is_retried_exits_0(
    kafka_bootstrap: str,
    postgres_database: tuple[str, str],
    postgres_outage: Any,
    tmp_path: Path,
    topic_name: str,
    writer: str,
) -> None:
    """The first windows are committed, the database goes away, the next window's transaction
    is retried, SIGTERM comes. (A process writer's error reaches the worker as its text only.)"""
    url, _ = postgres_database
    log = tmp_path / "run.log"
    ensure_topics(kafka_bootstrap, {f"{topic_name}.docs": 1})
    first, rest = _DOCS[:200], _DOCS[200:]
    assert replay_documents(first, kafka_bootstrap, f"{topic_name}.docs").produced == len(first)
    proc = _start(kafka_bootstrap, topic_name, url, log, writer)
    try:
        _wait_for(_logged(log, "committed"), "a window's commit")
        postgres_outage.begin()
        assert replay_documents(rest, kafka_bootstrap, f"{topic_name}.docs").produced == len(rest)
        _wait_for(_logged(log, '"writing results failed ('), "a transaction to be retried")
        _stopped_cleanly(proc, log, "writing results")
    finally:
        proc.kill()


@pytest.mark.kafka
@pytest.mark.postgres
def test_a_stop_while_a_checkpoint_read_is_retried_exits_0(
    kafka_bootstrap: str,
    postgres_database: tuple[str, str],
    postgres_outage: Any,
    tmp_path: Path,
    topic_name: str,
) -> None:
    """The worker is up, the database goes away, a new stream's first message makes it read the
    stream's checkpoint, retried, SIGTERM comes."""
    url, _ = postgres_database
    log = tmp_path / "run.log"
    Store.open(url).dispose()
    ensure_topics(kafka_bootstrap, {f"{topic_name}.docs": 1})
    proc = _start(kafka_bootstrap, topic_name, url, log, "process")
    try:
        _wait_for(_logged(log, " assigned ["), "the worker's partition")
        postgres_outage.begin()
        assert replay_documents(_DOCS[:50], kafka_bootstrap, f"{topic_name}.docs").produced == 50
        _wait_for(_logged(log, '"reading a checkpoint failed ('), "a checkpoint read's retry")
        _stopped_cleanly(proc, log, "reading a checkpoint")
    finally:
        proc.kill()


class _StoppedWorker:
    """A worker loop as :func:`run_loops` sees it that, once stopped, raises ``error``."""

    input_topic = "in"

    def __init__(self, error: BaseException) -> None:
        self.processor = type("P", (), {"name": "detector"})()
        self.destination = type("D", (), {"output_topic": None})()
        self.health = Heartbeat("detector")
        self._error = error
        self._stop = threading.Event()

    def stop(self) -> None:
        self.health.stop_requested()
        self._stop.set()

    def run(self, until_idle_s: float | None, upstream_running: object) -> None:
        self._stop.wait()
        raise self._error


def _run_stopped(error: BaseException) -> None:
    worker = _StoppedWorker(error)
    threading.Timer(0.2, worker.stop).start()
    run_loops([worker], [None], install_signals=False)  # type: ignore[list-item]


def test_an_abandoned_retry_of_a_stopped_worker_is_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    abandoned = "RetryAbandonedError: writing results abandoned on shutdown (x)"
    _run_stopped(WriterError(abandoned))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_real_failure_of_a_stopped_worker_is_still_raised() -> None:
    with pytest.raises(WriterError, match="ValueError: a bug"):
        _run_stopped(WriterError("ValueError: a bug"))
