"""A writer's retries through a database outage, and its waits for a broker that takes nothing,
reach its loop: its heartbeat (``/readyz`` says ``retrying: writing results``) and
``sparsewatch_retries_total``. Real broker, real PostgreSQL made unavailable (ALTER DATABASE ...
ALLOW_CONNECTIONS false).

The writer (a process or a thread) retried a window's transaction with backoff for up to two
minutes while its worker showed ``writing`` and stayed ready: a database outage was invisible to
the probes and the metrics unless the loop's own database calls hit it.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from sparsewatch.consumers.health import Health
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.worker import WorkerLoop
from sparsewatch.consumers.writer import Destination, WriterError, make_writer
from sparsewatch.replay.producer import replay_documents
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Store

from tests.support.ports import free_port
from tests.support.probed_detector import get, probe, start_probed_detector, stop, wait_for
from tests.support.worker_stubs import OneStreamProcessor
from tests.support.writer_jobs import destination, stored_nothing, write_job

pytestmark = [pytest.mark.kafka]


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_a_writer_reports_each_wait_before_a_retry(
    kafka_bootstrap: str, postgres_database, postgres_outage, kind: str
) -> None:
    """Each wait of the job's backoff is reported, in order, with its length: a process
    writer's reports as the loop polls whether the job is done (on the loop's thread), a thread
    writer's on its own thread; the job commits once the outage ends."""
    url, _ = postgres_database
    store = Store.open(url)
    reports: list[tuple[str, float, str]] = []

    def on_retry(what: str, seconds: float) -> None:
        reports.append((what, seconds, threading.current_thread().name))

    writer = make_writer(kind, store, destination(kafka_bootstrap), "w", on_retry=on_retry)
    try:
        postgres_outage.begin()
        pending = writer.submit(write_job())
        end = time.monotonic() + 30
        while len(reports) < 3:
            assert time.monotonic() < end, reports
            assert not pending.ready()
            time.sleep(0.05)
        postgres_outage.end()
        pending.result()
    finally:
        writer.close()
    assert [(what, s) for what, s, _ in reports[:3]] == [
        ("writing results", 0.2),
        ("writing results", 0.4),
        ("writing results", 0.8),
    ]
    expected_thread = "MainThread" if kind == "process" else "w-writer"
    assert {thread for _, _, thread in reports} == {expected_thread}
    assert len(store.documents(limit=None)) == 50
    store.dispose()


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_a_writer_reports_every_10_s_of_waiting_for_the_broker(tmp_path: Path, kind: str) -> None:
    """Messages the broker does not take (nothing listens at its address): every 10 s of the
    wait is reported as ``publishing results``, as the log says it; a stop then abandons the
    job, nothing committed."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    store = Store.open(url)
    reports: list[tuple[str, float]] = []
    gone = Destination(f"127.0.0.1:{free_port()}", "g", "t.docs", "t.scores", "t.dlq")
    writer = make_writer(kind, store, gone, "w", on_retry=lambda *report: reports.append(report))
    try:
        pending = writer.submit(write_job())
        end = time.monotonic() + 30
        while not reports:
            assert time.monotonic() < end
            assert not pending.ready()
            time.sleep(0.1)
        assert reports == [("publishing results", 10.0)]
        writer.abandon_retries()
        with pytest.raises(WriterError, match="publishing results abandoned on shutdown"):
            pending.result()
    finally:
        writer.close()
        store.dispose()
    assert stored_nothing(url)


def _retries(base: str) -> float:
    """``sparsewatch_retries_total`` of the detector, as its endpoint serves it."""
    status, body = get(base + "/metrics")
    assert status == 200
    found = re.search(rb'^sparsewatch_retries_total\{worker="detector"\} (\S+)$', body, re.M)
    assert found, body.decode()[-2000:]
    return float(found.group(1))


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_a_database_outage_met_by_the_writer_makes_the_worker_retrying_and_counts(
    kafka_bootstrap: str, postgres_database, postgres_outage, tmp_path: Path, writer: str
) -> None:
    """The detector's windows meet a database outage in its writer: ``/readyz`` is 503 with
    ``retrying: writing results``, ``/healthz`` stays 200 (a restart would not bring the
    database back), ``sparsewatch_retries_total`` (0 before) counts the waits; once the
    database is back the worker is ready again and every document is stored once (the stream's
    end-of-stream marker closes its last window)."""
    url, _ = postgres_database
    prefix = f"retryreports-{writer}-{time.monotonic_ns()}"
    ensure_topics(kafka_bootstrap, {f"{prefix}.docs": 2})
    proc, log, base = start_probed_detector(
        kafka_bootstrap, prefix, tmp_path, SPARSEWATCH_DATABASE_URL=url, SPARSEWATCH_WRITER=writer
    )
    docs = generate_stream(1200, kind="tweet", seed=5)  # one stream, hours of event time
    store = Store.open(url)
    try:
        wait_for(lambda: probe(base, "/readyz")[0] == 200, "/readyz 200", proc, log)
        assert replay_documents(docs[:600], kafka_bootstrap, f"{prefix}.docs").produced == 600
        # (the stream's checkpoint read, its first windows committed: what follows is the
        # writer's, not the loop's own database calls)
        wait_for(lambda: len(store.windows()) >= 2, "the first windows", proc, log)
        assert _retries(base) == 0
        postgres_outage.begin()
        store.engine.dispose()
        sent = replay_documents(docs[600:], kafka_bootstrap, f"{prefix}.docs", end_of_stream=True)
        assert sent.produced == 600
        seen: list[tuple[int, dict]] = []

        def retrying() -> bool:
            status, body = probe(base, "/readyz")
            seen.append((status, body))
            return status == 503 and body["workers"]["detector"]["reason"] == (
                "retrying: writing results"
            )

        wait_for(retrying, "/readyz: retrying: writing results", proc, log)
        status, body = probe(base, "/healthz")
        assert status == 200 and body["workers"]["detector"]["alive"], body
        assert _retries(base) >= 1
        postgres_outage.end()
        wait_for(lambda: probe(base, "/readyz")[0] == 200, "/readyz 200 again", proc, log)
        wait_for(lambda: len(store.documents(limit=None)) == 1200, "every document", proc, log)
        stop(proc, log)
    finally:
        proc.kill()
        postgres_outage.end()
    ids = [d["doc_id"] for d in store.documents(limit=None)]
    store.dispose()
    assert sorted(ids) == sorted(d["id"] for d in docs)
    assert "writing results failed (OperationalError" in log.read_text()


class _Processor(OneStreamProcessor):
    name = "retry-reports"


def test_a_writer_report_while_the_loop_computes_is_counted_not_shown(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """A report read while the loop computes (a process writer's, read as the loop polls
    whether the job is done; a thread writer's, at any time) would stand for the rest of the
    computation: a window computed for longer than ``health_stall_s`` after it read "no
    progress while retrying", not alive. It is counted only; while the loop waits for its
    writer (``writing``) it is the loop's wait: not ready, alive for its length."""
    health = Health(stall_s=0.5)
    beat = health.heartbeat("w")
    store = Store.open(f"sqlite:///{tmp_path / 'w.db'}")
    t = topic_name
    loop = WorkerLoop(
        _Processor(), store, kafka_bootstrap, t, f"{t}.in", None, f"{t}.dlq", health=beat
    )
    retries = REGISTRY.get_sample_value("sparsewatch_retries_total", {"worker": _Processor.name})
    beat.started()
    keepalive = threading.Event()
    helper = threading.Thread(target=keepalive.wait, name=f"{beat.thread}-keepalive")
    helper.start()
    try:
        with beat.phase("computing", "a long window"):
            loop._writer_waits("writing results", 0.2)
            time.sleep(1.0)  # past health_stall_s, and past the wait
            assert beat.state == "computing"
            assert health.liveness()[0], health.liveness()
        with beat.phase("writing", "waiting for its writer's transaction"):
            loop._writer_waits("writing results", 5.0)
            ready, body = health.readiness()
            assert not ready and body["workers"]["w"]["reason"] == "retrying: writing results"
            assert health.liveness()[0], health.liveness()
    finally:
        keepalive.set()
        helper.join()
        store.dispose()
    counted = REGISTRY.get_sample_value("sparsewatch_retries_total", {"worker": _Processor.name})
    assert counted == (retries or 0.0) + 2
