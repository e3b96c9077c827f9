"""A stop request reaches the writer's job whenever it lands (``consumers/writer.py``).

The process writer signalled its child (SIGUSR1) only while it counted a job as in flight, which
began after the job was sent: a stop landing between the send and that mark, or before the job was
handed over at all, was lost, and the job waited out a database outage (up to 120 s) before the
worker could exit. And a stop landing while the child was still starting up killed it (SIGUSR1's
default action), losing the job of a healthy database with a WriterError.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from sparsewatch.consumers.writer import ProcessWriter, WriterError, make_writer
from sparsewatch.storage.store import Store

from tests.support.writer_jobs import destination, job_outcome, stored_nothing, write_job

pytestmark = pytest.mark.kafka


def test_a_stop_while_the_writer_process_starts_up_commits_the_job(kafka_bootstrap, tmp_path):
    """With the database up, a stop only abandons retries: the job sent to a child still starting
    up commits (the child was killed by the signal: 'the writer process is gone')."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    Store.open(url).dispose()
    writer = ProcessWriter(url, destination(kafka_bootstrap), "test")
    try:
        pending = writer.submit(write_job())
        writer.abandon_retries()  # the child is still importing (about a second)
        outcome = job_outcome(pending, 60)
        assert isinstance(outcome, float), outcome
    finally:
        writer.close()
    store = Store.open(url)
    try:
        assert len(store.documents(limit=None)) == 50
    finally:
        store.dispose()


class _StopRightAfterSend:
    """The writer's connection, with a stop landing right after each send returns (before the
    writer can do anything else): the interleaving of a SIGTERM handled on another thread."""

    def __init__(self, writer: ProcessWriter) -> None:
        self._writer = writer
        self._conn = writer._conn

    def send(self, obj: Any) -> None:
        self._conn.send(obj)
        if obj is not None:
            self._writer.abandon_retries()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.parametrize("when", ["before-submit", "between-send-and-mark"])
def test_a_stop_landing_around_a_submit_abandons_the_job_in_an_outage(
    kafka_bootstrap, postgres_database, postgres_outage, when
):
    url, _ = postgres_database
    store = Store.open(url)
    writer = make_writer("process", store, destination(kafka_bootstrap), "test")
    assert isinstance(writer, ProcessWriter)
    try:
        time.sleep(3.0)  # the child is up (not the start-up case above)
        postgres_outage.begin()
        if when == "before-submit":
            writer.abandon_retries()
        else:
            writer._conn = _StopRightAfterSend(writer)  # type: ignore[assignment]
        t0 = time.monotonic()
        outcome = job_outcome(writer.submit(write_job()), 30)
        assert outcome is not None, "the job waited out the outage despite the stop"
        assert time.monotonic() - t0 < 10.0
        assert isinstance(outcome, WriterError)
        assert "RetryAbandonedError: writing results abandoned" in str(outcome)
    finally:
        postgres_outage.end()  # (on a failure: the job then commits, and close returns)
        writer.close()
        store.dispose()
    assert stored_nothing(url)


def test_the_thread_writer_also_abandons_a_job_submitted_after_a_stop(
    kafka_bootstrap, postgres_database, postgres_outage
):
    """(As it did: its stop event stays set; the process writer now behaves the same.)"""
    url, _ = postgres_database
    store = Store.open(url)
    writer = make_writer("thread", store, destination(kafka_bootstrap), "test")
    try:
        postgres_outage.begin()
        writer.abandon_retries()
        outcome = job_outcome(writer.submit(write_job()), 30)
        assert isinstance(outcome, WriterError), outcome
        assert "RetryAbandonedError" in str(outcome)
    finally:
        postgres_outage.end()
        writer.close()
        store.dispose()
