"""The metrics of a committed transaction are served once it is committed, not at the next one.

The worker accounted for a write-behind transaction (documents, windows, novelty, window latency,
dead letters; and its offsets committed to Kafka) only when it waited for it, which is before the
next transaction or at shutdown: after the last window of a burst, or after a lone malformed
message, the endpoint kept showing the counts from before it for as long as the input stayed quiet.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid

import pytest
from prometheus_client import REGISTRY
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.messages import EndOfStream
from sparsewatch.consumers.metrics import IngestMetrics, WorkerMetrics
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Store
from sqlalchemy import text

from sparsewatch.config import load_config
from sparsewatch.runner import build_worker, run_workers
from tests.support.ports import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _metric(name: str) -> float:
    return REGISTRY.get_sample_value(name, {"worker": "detector"}) or 0.0


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_metrics_count_a_transaction_once_it_is_committed(kafka_bootstrap, tmp_path, writer):
    prefix = f"metrics-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'metrics.db'}"
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
            "SPARSEWATCH_KAFKA_PARTITIONS": "1",
            "SPARSEWATCH_DATABASE_URL": url,
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "600",
            "SPARSEWATCH_WRITER": writer,
            "SPARSEWATCH_ANOMALY_ENABLED": "false",
        }
    )
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 1})
    producer = make_producer(kafka_bootstrap)
    docs = generate_stream(30, kind="tweet", stream="s", seed=1)
    for doc in docs:
        producer.produce(topic, key=b"s", value=json.dumps(doc).encode())
    producer.produce(topic, key=b"s", value=EndOfStream("s").to_json())  # closes the window
    producer.produce(topic, key=b"s", value=b"{oops")
    assert producer.flush(30) == 0
    before = {
        name: _metric(name)
        for name in ("sparsewatch_documents_total", "sparsewatch_dead_letters_total")
    }
    store = Store.open(url)
    worker = build_worker("detector", config, store)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with store.reading() as conn:
                dead = conn.execute(text("select count(*) from dead_letters")).scalar_one()
            if dead:
                break
            time.sleep(0.2)
        assert dead == 1 and len(store.documents(limit=None)) == len(docs)
        time.sleep(3.0)  # six polls of the quiet input
        assert runner.is_alive()
        assert _metric("sparsewatch_documents_total") - before[
            "sparsewatch_documents_total"
        ] == len(docs)
        assert (
            _metric("sparsewatch_dead_letters_total") - before["sparsewatch_dead_letters_total"]
            == 1
        )
    finally:
        worker.stop()
        runner.join(60)
        store.dispose()


def test_the_metrics_endpoint_stops_with_the_workers(kafka_bootstrap, tmp_path):
    """The endpoint served while the workers ran and was never closed: a second run in the same
    process (a test, an embedding application) could not bind the port again."""
    port = free_port()
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "SPARSEWATCH_KAFKA_TOPIC_PREFIX": f"metrics-stop-{uuid.uuid4().hex[:8]}",
            "SPARSEWATCH_KAFKA_PARTITIONS": "1",
            "SPARSEWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'stop.db'}",
            "SPARSEWATCH_METRICS_PORT": str(port),
            "SPARSEWATCH_ANOMALY_ENABLED": "false",
        }
    )
    served: list[bytes] = []
    running = threading.Event()

    def scrape() -> None:
        while running.is_set() and not served:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    served.append(r.read())
            except OSError:
                time.sleep(0.05)

    for _ in range(2):  # the second run binds the port the first one freed
        served.clear()
        running.set()
        scraper = threading.Thread(target=scrape)
        scraper.start()
        try:
            run_workers(config, ["detector"], until_idle_s=3.0)
        finally:
            running.clear()
            scraper.join()
        assert served and b"sparsewatch_documents_total" in served[0]
        # the workers' families and the process's, none of the ingest bridge's (empty) ones
        assert b"sparsewatch_ingest" not in served[0]
        assert b"process_resident_memory_bytes" in served[0]
        with pytest.raises(OSError):  # nothing listens once the workers have stopped
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_every_series_exists_from_the_start() -> None:
    """Series were born at their first increment: increase() and rate() missed it (the first
    dead letters after every restart) and documents/s read "no data" instead of 0."""
    WorkerMetrics("metrics-probe")
    IngestMetrics()
    for name in (
        "sparsewatch_documents_total",
        "sparsewatch_novel_total",
        "sparsewatch_windows_total",
        "sparsewatch_late_documents_total",
        "sparsewatch_dead_letters_total",
        "sparsewatch_window_latency_seconds_count",
        "sparsewatch_consumer_lag",
    ):
        assert REGISTRY.get_sample_value(name, {"worker": "metrics-probe"}) == 0.0, name
    for name, labels in (
        ("sparsewatch_ingest_records_total", {"outcome": "dead_lettered"}),
        ("sparsewatch_ingest_transactions_total", {"result": "aborted"}),
        ("sparsewatch_dead_letters_total", {"worker": "ingest"}),
    ):
        assert REGISTRY.get_sample_value(name, labels) is not None, name


def test_late_documents_are_counted_apart_from_the_windows() -> None:
    """Late documents (an output that is no window) were counted nowhere."""
    from sparsewatch.consumers.processor import Output

    metrics = WorkerMetrics("late-probe")
    metrics.observe([Output(is_window=False, late=3), Output(n_documents=5, novel=1)], [0.1], 0)
    labels = {"worker": "late-probe"}
    assert REGISTRY.get_sample_value("sparsewatch_late_documents_total", labels) == 3
    assert REGISTRY.get_sample_value("sparsewatch_documents_total", labels) == 5
    assert REGISTRY.get_sample_value("sparsewatch_windows_total", labels) == 1
