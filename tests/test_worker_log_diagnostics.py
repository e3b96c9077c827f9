"""Diagnosing the workers of one process (``sparsewatch run all``) from their logs.

* Every JSON log line says its thread: the worker's (``detector``, ``anomaly``) or its writer's
  (``<worker>-writer``, a child process or a thread). Retry lines, consumer errors and every line
  of the writer processes said nothing of the worker they came from.
* A writer process killed while its worker has no job in flight (the OOM killer, ``kill -9``)
  stops the worker at once. It went on reading and looked healthy until its next transaction,
  up to a whole window later.
* A job's error in the writer process is logged there with its traceback (ERROR for a bug,
  DEBUG for the environment's errors), and the parent's :class:`WriterError` carries it as a
  note (``--debug``); its one-line message is unchanged. Only ``Type: message`` came back.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sparsewatch.consumers.writer import ProcessWriter, ThreadWriter, WriterError, make_writer
from sparsewatch.storage.store import Store

from sparsewatch.logs import JsonLines
from tests.support.worker_stubs import OneStreamProcessor, stub_worker
from tests.support.writer_jobs import destination, write_job

pytestmark = pytest.mark.kafka


def _entries(stderr: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``stderr`` (other output, such as pytest's, is skipped)."""
    entries = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            entries.append(json.loads(line))
    return entries


def test_a_log_line_names_its_thread() -> None:
    """(A worker's thread is named after it by sparsewatch/runner.py.)"""
    records: list[logging.LogRecord] = []

    def log_one() -> None:
        records.append(
            logging.LogRecord("sparsewatch.consumers.retry", logging.WARNING, "", 0, "x", (), None)
        )

    thread = threading.Thread(target=log_one, name="anomaly")
    thread.start()
    thread.join()
    assert json.loads(JsonLines().format(records[0]))["thread"] == "anomaly"


def test_the_thread_writers_thread_is_the_workers_writer(kafka_bootstrap: str) -> None:
    store = Store.open("sqlite://")
    writer = make_writer("thread", store, destination(kafka_bootstrap), "anomaly")
    assert isinstance(writer, ThreadWriter)
    try:
        name = writer._pool.submit(lambda: threading.current_thread().name).result()
    finally:
        writer.close()
        store.dispose()
    assert name == "anomaly-writer"


def test_a_bug_in_the_writer_process_is_logged_there_with_its_traceback(
    kafka_bootstrap: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    Store.open(url).dispose()
    writer = ProcessWriter(url, destination(kafka_bootstrap), "detector")
    try:
        with pytest.raises(WriterError) as raised:
            writer.submit(write_job(bad_row=True)).result()
    finally:
        writer.close()
    # The parent's one line, as before; the child's traceback rides along for --debug.
    assert str(raised.value) == "ValueError: document 'd49' of 's' has no event_time"
    assert "in insert_documents" in "".join(raised.value.__notes__)
    errors = [e for e in _entries(capfd.readouterr().err) if e["level"] == "ERROR"]
    assert len(errors) == 1, errors
    assert errors[0]["thread"] == "detector-writer"
    assert "ValueError: document 'd49' of 's' has no event_time" in errors[0]["message"]
    assert "in insert_documents" in errors[0]["traceback"]


def test_an_abandoned_job_is_logged_in_the_writer_process_at_debug(
    kafka_bootstrap: str,
    postgres_database: tuple[str, str],
    postgres_outage: Any,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stop during a database outage is no bug: its traceback only at DEBUG (the level the
    child takes from its parent's root logger); the retry lines also name the writer."""
    url, _ = postgres_database
    Store.open(url).dispose()
    caplog.set_level(logging.DEBUG)
    writer = ProcessWriter(url, destination(kafka_bootstrap), "anomaly")
    try:
        writer.submit(write_job(n=1)).result()  # the child is up
        postgres_outage.begin()
        pending = writer.submit(write_job())
        time.sleep(2.0)  # the transaction failed and waits to be retried
        writer.abandon_retries()
        with pytest.raises(WriterError, match="RetryAbandonedError"):
            pending.result()
    finally:
        postgres_outage.end()
        writer.close()
    entries = [e for e in _entries(capfd.readouterr().err) if e["thread"] == "anomaly-writer"]
    assert not [e for e in entries if e["level"] == "ERROR"]
    assert any(e["message"].startswith("writing results failed (") for e in entries)
    failed = [e for e in entries if "nothing of them committed" in e["message"]]
    assert [e["level"] for e in failed] == ["DEBUG"]
    assert "RetryAbandonedError" in failed[0]["traceback"]


class _Processor(OneStreamProcessor):
    """One stream whose state never closes a window."""

    def __init__(self) -> None:
        self.name = f"killed-{uuid.uuid4().hex[:6]}"


def test_a_writer_process_killed_while_idle_stops_its_worker_at_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"killed-{uuid.uuid4().hex[:8]}"
    store = Store.open(f"sqlite:///{tmp_path / 'k.db'}")
    processor = _Processor()
    worker = stub_worker(processor, store, kafka_bootstrap, prefix, poll_timeout_s=0.2)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    runner = threading.Thread(target=run, name=processor.name)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while worker._consumer is None and time.monotonic() < deadline:
            time.sleep(0.05)
        writer = worker._writer
        assert isinstance(writer, ProcessWriter)
        os.kill(writer._process.pid, signal.SIGKILL)
        runner.join(5.0)
        assert not runner.is_alive(), "the worker went on without its writer process"
    finally:
        worker.stop()
        runner.join(60)
        store.dispose()
    assert [str(e) for e in errors] == [
        f"the writer process of {processor.name} died (exit code -9)"
    ]
    assert isinstance(errors[0], WriterError)
