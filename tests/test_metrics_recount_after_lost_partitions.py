"""The counters count each window and late document once per process, also when its partitions
are lost and assigned again.

A broker outage longer than the session timeout takes the worker's partitions away (``on_lost``):
their streams' states are dropped without a checkpoint, and once the broker is back the same
process re-reads them from the stored resume offsets and recomputes every window since each
stream's last checkpoint. ``sparsewatch_documents_total``, ``_novel_total``, ``_windows_total``
and ``_late_documents_total`` counted those again (2,112 documents became 4,448 while the
database held 2,224), and the latency histogram took a second observation per window. Counting
again belongs to a crash restart only (consumers/metrics.py). Real stream states, a real broker
and a real SQLite database.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sparsewatch.consumers import detector_worker
from sparsewatch.consumers.anomaly_worker import AnomalyStreamState
from sparsewatch.consumers.detector_core import StreamModels
from sparsewatch.consumers.detector_worker import DetectorStreamState
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.metrics import WorkerMetrics
from sparsewatch.consumers.processor import Output
from sparsewatch.consumers.score_messages import parse_scored
from sparsewatch.consumers.windowing import ClosedWindow
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Checkpoint, Store
from sqlalchemy import text

from sparsewatch.config import DetectorConfig, load_config
from sparsewatch.kafka_local import LocalKafka
from sparsewatch.runner import build_worker
from tests.support.anomaly_worker import window
from tests.support.worker_stubs import Running

FAMILIES = (
    "sparsewatch_documents_total",
    "sparsewatch_novel_total",
    "sparsewatch_windows_total",
    "sparsewatch_late_documents_total",
    "sparsewatch_window_latency_seconds_count",
)
WORDS = ["storm", "market", "election", "football", "vaccine", "bridge", "festival", "court"]


def _counts(worker: str) -> dict[str, float]:
    return {name: REGISTRY.get_sample_value(name, {"worker": worker}) or 0.0 for name in FAMILIES}


def _observe(metrics: WorkerMetrics, outputs: list[Output]) -> None:
    """What the worker does once their transaction is committed."""
    metrics.observe(outputs, [0.1 for out in outputs if out.is_window], 0)


def _restored(arrays: dict[str, Any], meta: dict[str, Any]) -> Checkpoint:
    return Checkpoint("g", "s", arrays, meta, datetime.now(UTC))


def _doc(i: int, ts: int) -> Document:
    return Document(f"d{i}", f"{WORDS[i % 8]} {WORDS[(i * 3 + 1) % 8]} report number {i}", ts)


def test_detector_windows_and_late_documents_recomputed_after_a_loss_are_not_counted_again():
    """Windows of 1 s: after the checkpoint, windows 0 and 1 close and a document of window 0
    comes late; the partition is lost and the stream restored from its checkpoint recomputes
    both windows and stores the late document again, as the worker's re-read does."""
    config = load_config(env={"SPARSEWATCH_WINDOWS_SIZE": "1s"})
    worker = f"recount-detector-{uuid.uuid4().hex[:6]}"
    metrics = WorkerMetrics(worker)
    messages = [_doc(0, 100), _doc(1, 1100), _doc(2, 200), _doc(3, 2100), _doc(4, 3100)]

    def feed(state: DetectorStreamState, offsets: range) -> list[Output]:
        outputs = []
        for offset in offsets:
            outputs += state.add(messages[offset], 0, offset, now=0.0)
            outputs += state.close_idle(silent_until=0.0, wall_ms=0.0)  # one message a batch
        return outputs

    state = DetectorStreamState("s", config, None)
    feed(state, range(1))
    checkpoint = state.checkpoint()  # the stream's last checkpoint: window 0 open
    resume = state.min_buffered_offset(0)
    first = feed(state, range(1, 4))
    assert sum(out.is_window for out in first) == 2 and sum(out.late for out in first) == 1
    _observe(metrics, first)
    counted = _counts(worker)
    assert counted["sparsewatch_windows_total"] == 2
    assert counted["sparsewatch_late_documents_total"] == 1

    restored = DetectorStreamState("s", config, _restored(*checkpoint))
    again = feed(restored, range(resume, 4))
    assert [out.summary.split(" (")[0] for out in again if out.is_window] == [
        out.summary.split(" (")[0] for out in first if out.is_window
    ]
    assert sum(out.late for out in again) == 1  # the state stores it again: its first reading
    _observe(metrics, again)
    assert _counts(worker) == counted

    _observe(metrics, feed(restored, range(4, 5)))  # window 2: new
    after = _counts(worker)
    assert after["sparsewatch_windows_total"] == 3
    assert after["sparsewatch_window_latency_seconds_count"] == 3
    assert after["sparsewatch_documents_total"] == counted["sparsewatch_documents_total"] + 1


def test_anomaly_windows_recomputed_after_a_loss_are_not_counted_again():
    config = load_config(
        env={
            "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "20",
            "SPARSEWATCH_ANOMALY_REFIT_EVERY_WINDOWS": "1000",
            "SPARSEWATCH_ANOMALY_REFIT_DRIFT_P": "0",
        }
    )
    worker = f"recount-anomaly-{uuid.uuid4().hex[:6]}"
    metrics = WorkerMetrics(worker)
    sent = [raw for seq in range(6) for _, raw in window("s", seq)]

    def feed(state: AnomalyStreamState, offsets: range) -> list[Output]:
        return [out for o in offsets for out in state.add(parse_scored(sent[o]), 0, o, 0.0)]

    state = AnomalyStreamState("s", config, None)
    feed(state, range(30))  # windows 0-2 (0 and 1 the reference set)
    checkpoint = state.checkpoint()
    first = feed(state, range(30, 60))
    assert sum(out.is_window for out in first) == 3
    _observe(metrics, first)
    counted = _counts(worker)
    assert counted["sparsewatch_documents_total"] == 30

    again = feed(AnomalyStreamState("s", config, _restored(*checkpoint)), range(30, 60))
    assert sum(out.is_window for out in again) == 3
    _observe(metrics, again)
    assert _counts(worker) == counted


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The windows the detector computes (the real core's), in order."""
    windows: list[tuple[str, int]] = []
    real = detector_worker.process_window

    def recorded(models: StreamModels, closed: ClosedWindow, config: DetectorConfig) -> Any:
        windows.append((closed.stream, closed.seq))
        return real(models, closed, config)

    monkeypatch.setattr(detector_worker, "process_window", recorded)
    return windows


def _until(condition: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {timeout:g} s"
        time.sleep(0.2)


@pytest.mark.kafka
@pytest.mark.slow
def test_a_broker_outage_longer_than_the_session_counts_each_window_once(
    tmp_path: Path, computed: list[tuple[str, int]], caplog: pytest.LogCaptureFixture
) -> None:
    """End to end: the detector computes four windows (no checkpoint yet), the broker is down
    for longer than the 6 s session, and once it is back the worker re-reads its partition and
    recomputes them: the counters still say what the database holds."""
    broker = LocalKafka(tmp_path / "broker", port=0)
    port = int(broker.up().rsplit(":", 1)[1])
    bootstrap = f"127.0.0.1:{port}"
    prefix = f"recount-{uuid.uuid4().hex[:8]}"
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
            "SPARSEWATCH_KAFKA_PARTITIONS": "1",
            "SPARSEWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'recount.db'}",
            "SPARSEWATCH_WINDOWS_COUNT": "50",
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "600",
            "SPARSEWATCH_DETECTOR_TOPICS": "false",
            "SPARSEWATCH_DETECTOR_EMERGING_TOPICS": "false",
            "SPARSEWATCH_WRITER": "thread",
            "SPARSEWATCH_ANOMALY_ENABLED": "false",
        }
    )
    topic = config.kafka.topic("docs")
    ensure_topics(bootstrap, {topic: 1})
    producer = make_producer(bootstrap)
    for doc in generate_stream(230, kind="tweet", stream="s", seed=5):  # windows 0-3, 30 open
        producer.produce(topic, key=b"s", value=json.dumps(doc).encode())
    assert producer.flush(30) == 0
    before = _counts("detector")
    store = Store.open(config.resolved_database_url)
    try:
        running = Running(build_worker("detector", config, store, {"session.timeout.ms": 6000}))
        try:
            _until(lambda: len(store.windows()) == 4, "computed and stored", 60)
            broker.kill()
            time.sleep(10.0)  # longer than the session
            LocalKafka(tmp_path / "broker", port=port).up()
            _until(lambda: len(computed) == 8, "recomputed once assigned again", 90)
            time.sleep(3.0)  # six polls: the recomputed windows' transaction is accounted for
        finally:
            running.stop()
        assert any(" lost [" in r.getMessage() for r in caplog.records), "no partition lost"
        assert computed == [("s", seq) for seq in range(4)] * 2
        with store.reading() as conn:
            windows, documents, novel = conn.execute(
                text(
                    "select count(distinct w.window_seq), count(*), "
                    "coalesce(sum(case when d.novel then 1 else 0 end), 0) "
                    "from documents d join windows w "
                    "on w.stream = d.stream and w.window_seq = d.window_seq"
                )
            ).one()
    finally:
        store.dispose()
        LocalKafka(tmp_path / "broker", port=port).down()
    after = _counts("detector")
    delta = {name: after[name] - before[name] for name in FAMILIES}
    assert (windows, documents) == (4, 200)
    assert delta == {
        "sparsewatch_documents_total": documents,
        "sparsewatch_novel_total": novel,
        "sparsewatch_windows_total": windows,
        "sparsewatch_late_documents_total": 0,
        "sparsewatch_window_latency_seconds_count": windows,
    }
