"""Two anomaly worker processes in one consumer group, with a real broker and PostgreSQL.

A multi-partition ``<prefix>.scores`` topic carries several streams whose windows' messages
interleave; some windows are re-sent (a detector that crashed while flushing them and recomputed
them identically), some have a cut version superseded by a recomputed one of another size. While
the messages arrive, workers join the group, one leaves (SIGTERM) and one is killed with SIGKILL.
The final database must equal a single uninterrupted worker's: every document scored once, with
the same anomaly score (within 1e-6) and flag, the same alerts and the same dead letters.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid

import numpy as np
import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from sparsewatch.runner import build_worker, run_loops
from tests.support.anomaly_worker import scores_payload
from tests.support.pipeline_kafka import spawn_worker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STREAMS = [f"s{k}" for k in range(6)]
PARTITIONS = 4
WINDOWS = 40


def _env(bootstrap: str, prefix: str, db_url: str, **extra: str) -> dict[str, str]:
    return {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
        "SPARSEWATCH_KAFKA_GROUP_ID": prefix,
        "SPARSEWATCH_KAFKA_PARTITIONS": str(PARTITIONS),
        "SPARSEWATCH_DATABASE_URL": db_url,
        "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "8",
        "SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY": "3",
        "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "60",
        "SPARSEWATCH_ANOMALY_REFIT_EVERY_WINDOWS": "4",
        "SPARSEWATCH_ANOMALY_CONTAMINATION": "0.1",
        **extra,
    }


def _message(stream: str, seq: int, i: int, n: int, tag: str, rng: np.random.Generator) -> bytes:
    """Document ``i`` of ``n`` of window ``seq`` as the detector sends it; the representation
    drifts after window 20 (refits by the drift test) and a few documents are odd."""
    odd = rng.random() < 0.05
    shift = 0.25 if seq >= 20 else 0.0
    score = 0.05 if odd else float(np.clip(rng.normal(0.6 + shift, 0.1), 0.0, 1.0))
    atoms = 12 if odd else int(rng.integers(1, 5))
    return scores_payload(
        stream=stream,
        doc_id=f"{stream}-{seq}-{tag}-{i}",
        seq=seq,
        i=i,
        n=n,
        timestamp=1_700_000_000_000 + 60_000 * seq + i,
        score=score,
        error=float(np.clip(rng.normal(0.5, 0.1), 0.0, 1.0)),
        code_value=[float(v) for v in rng.uniform(0.05, 0.5, atoms)],
        n_terms=int(rng.integers(5, 40)),
    )


def _stream_messages(stream: str, seed: int) -> list[bytes]:
    """One stream's messages in the order the detector(s) sent them."""
    rng = np.random.default_rng(seed)
    windows = []
    for seq in range(WINDOWS):
        n = int(rng.integers(8, 30))
        windows.append([_message(stream, seq, i, n, "a", rng) for i in range(n)])
    sent: list[bytes] = []
    for seq, msgs in enumerate(windows):
        if seq % 7 == 3:  # crashed mid-flush, then recomputed identically and re-sent
            cut = len(msgs) // 3
            sent += msgs[:cut] + windows[seq - 1] + msgs
        elif seq % 11 == 5:  # crashed mid-flush, then closed later with more documents
            cut = [_message(stream, seq, i, len(msgs) - 3, "cut", rng) for i in range(4)]
            sent += cut + msgs
        else:
            sent += msgs
    return sent


def _feed(bootstrap: str, topic: str, seconds: float) -> None:
    """All streams' messages, interleaved message by message, spread over ``seconds``."""
    queues = [_stream_messages(s, k) for k, s in enumerate(STREAMS)]
    order = [
        (stream, q[step])
        for step in range(max(map(len, queues)))
        for stream, q in zip(STREAMS, queues, strict=True)
        if step < len(q)
    ]
    producer = make_producer(bootstrap)
    chunk = max(len(order) // int(seconds * 10), 1)
    for start in range(0, len(order), chunk):
        for stream, raw in order[start : start + chunk]:
            producer.produce(topic, key=stream.encode(), value=raw)
        producer.poll(0)
        time.sleep(0.1)
    assert producer.flush(60) == 0


def _results(url: str) -> tuple[dict, dict, set]:
    store = Store.open(url)
    try:
        docs = store.documents(limit=None)
        alerts = store.alerts(limit=None)
        dead = store.dead_letters(limit=None)
    finally:
        store.dispose()
    rows = {(r["stream"], r["doc_id"]): (r["anomaly_score"], bool(r["anomaly"])) for r in docs}
    assert len(rows) == len(docs)
    keyed = {(a["kind"], a["stream"], a["subject_id"]): a["score"] for a in alerts}
    assert len(keyed) == len(alerts)
    return rows, keyed, {(d["partition"], d["offset"], d["reason"]) for d in dead}


def test_two_anomaly_workers_share_streams_across_join_leave_and_kill(
    kafka_bootstrap, postgres_database, tmp_path
):
    prefix = f"agroup-{uuid.uuid4().hex[:8]}"
    url, _ = postgres_database
    env = _env(kafka_bootstrap, prefix, url)
    topic = f"{prefix}.scores"
    ensure_topics(kafka_bootstrap, {topic: PARTITIONS})
    feeder = threading.Thread(target=_feed, args=(kafka_bootstrap, topic, 40.0))
    feeder.start()
    log = tmp_path / "workers.log"
    first = spawn_worker(env, log, role="anomaly")
    time.sleep(10.0)
    second = spawn_worker(env, log, role="anomaly")  # joins: partitions move
    time.sleep(8.0)
    assert first.poll() is None, log.read_text()[-3000:]
    first.send_signal(signal.SIGTERM)  # leaves cleanly: its partitions move back
    assert first.wait(timeout=120) == 0, log.read_text()[-3000:]
    third = spawn_worker(env, log, role="anomaly")  # joins
    time.sleep(10.0)
    assert second.poll() is None, log.read_text()[-3000:]
    second.send_signal(signal.SIGKILL)  # its partitions move after the session timeout
    second.wait()
    feeder.join()
    assert third.wait(timeout=600) == 0, log.read_text()[-3000:]

    ref_url = f"sqlite:///{tmp_path / 'reference.db'}"
    ref_env = _env(kafka_bootstrap, prefix, ref_url, SPARSEWATCH_KAFKA_GROUP_ID=f"{prefix}-ref")
    store = Store.open(ref_url)
    try:
        run_loops([build_worker("anomaly", load_config(env=ref_env), store)], [12.0], False)
    finally:
        store.dispose()

    rows, alerts, dead = _results(url)
    ref_rows, ref_alerts, ref_dead = _results(ref_url)
    assert ref_rows and ref_alerts and ref_dead
    assert rows.keys() == ref_rows.keys()
    for key, (score, flag) in ref_rows.items():
        assert rows[key][1] == flag and abs(rows[key][0] - score) <= 1e-6, key
    assert alerts.keys() == ref_alerts.keys()
    for key, score in ref_alerts.items():
        assert abs(alerts[key] - score) <= 1e-6, key
    assert dead == ref_dead
