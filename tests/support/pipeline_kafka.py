"""The detector pipeline against a real broker: its settings, two synthetic streams produced (with
malformed messages among them), a worker run as a process, and the scores it stored compared with
the per-window core run offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sparsewatch.consumers.detector_core import build_models, process_window
from sparsewatch.consumers.detector_worker import window_spec
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.messages import parse_document
from sparsewatch.consumers.windowing import Buffered, StreamWindower
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Store

from sparsewatch.config import Config

BAD = [
    b"{oops",
    b"\xff\xfe\xfa",
    b"[]",
    b'{"id": "x", "text": "t"}',
    b'{"id": "x", "text": 7, "timestamp": 1}',
    b'{"id": "x", "text": "t", "timestamp": "soon"}',
    # valid UTF-8 JSON whose strings cannot be stored (no UTF-8 form; NUL refused by PostgreSQL)
    b'{"id": "x", "text": "t\\ud800", "timestamp": 1}',
    b'{"id": "x", "text": "t", "timestamp": 1, "stream": "alpha\\udc00"}',
    b'{"id": "x\\u0000", "text": "t", "timestamp": 1}',
    # json.loads raises ValueError / RecursionError, not JSONDecodeError
    b'{"id": "x", "text": "t", "timestamp": 1' + b"0" * 5000 + b"}",
    b'{"id": "x", "text": "t", "meta": ' + b"[" * 20_000 + b"}",
]


# The 20,000-document recovery tests exercise the pipeline's mechanics; a fixed 100-atom dictionary
# keeps them fast. The end-to-end and rebalance tests run the default (growing) detector.
FIXED_DICTIONARY = {
    "SPARSEWATCH_DETECTOR_MAX_ATOMS": "100",
    "SPARSEWATCH_DETECTOR_NEW_ATOMS_PER_WINDOW": "0",
}


def pipeline_env(bootstrap: str, prefix: str, db_url: str, **extra: str) -> dict[str, str]:
    env = {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
        "SPARSEWATCH_KAFKA_PARTITIONS": "2",
        "SPARSEWATCH_DATABASE_URL": db_url,
        "SPARSEWATCH_WINDOWS_SIZE": "3h",
        "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "8",
        "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "200",
        "SPARSEWATCH_DETECTOR_SNAPSHOT_EVERY": "3",
        "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "150",
        "SPARSEWATCH_ANOMALY_REFIT_EVERY_WINDOWS": "4",
    }
    env.update(extra)
    return env


def spawn_worker(env: dict[str, str], log: Path, role: str = "detector") -> subprocess.Popen:
    """``sparsewatch run ROLE --until-idle 20`` with ``env`` over the environment, its output
    appended to ``log``."""
    return subprocess.Popen(
        [sys.executable, "-m", "sparsewatch", "run", role, "--until-idle", "20"],
        env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def streams(n_per_stream: int) -> list[dict]:
    a = generate_stream(n_per_stream, kind="tweet", stream="alpha", seed=11)
    b = generate_stream(n_per_stream, kind="mixed", stream="beta", seed=12)
    return sorted(a + b, key=lambda d: d["timestamp"])


def produce(bootstrap: str, topic: str, docs: list[dict], bad_every: int = 0) -> int:
    ensure_topics(bootstrap, {topic: 2})
    producer = make_producer(bootstrap)
    n_bad = 0
    for i, doc in enumerate(docs):
        producer.produce(topic, key=doc["stream"].encode(), value=json.dumps(doc).encode())
        if bad_every and i % bad_every == 0:
            producer.produce(topic, key=doc["stream"].encode(), value=BAD[n_bad % len(BAD)])
            n_bad += 1
        producer.poll(0)
    assert producer.flush(60) == 0
    return n_bad


def offline_scores(
    config: Config, docs: list[dict]
) -> dict[tuple[str, str], tuple[float | None, bool]]:
    """The per-window core alone, stream by stream, in arrival order, closing idle at the end."""
    out: dict[tuple[str, str], tuple[float | None, bool]] = {}
    for stream in sorted({d["stream"] for d in docs}):
        windower = StreamWindower(stream, window_spec(config))
        models = build_models(config.detector)
        closed = []
        for i, d in enumerate(x for x in docs if x["stream"] == stream):
            doc = parse_document(json.dumps(d).encode())
            windows, status = windower.add(Buffered(doc, 0, i), now=0.0)
            assert status == "buffered"
            closed += windows
        closed += windower.close_if_idle(now=1e12, wall_ms=1e15)
        for w in closed:
            for row in process_window(models, w, config.detector).documents.rows():
                out[(stream, row["doc_id"])] = (row["novelty_score"], row["novel"])
    return out


def stored_scores(store: Store) -> dict[tuple[str, str], tuple[float | None, bool]]:
    return {
        (r["stream"], r["doc_id"]): (r["novelty_score"], bool(r["novel"]))
        for r in store.documents(limit=None)
    }


def stored_results(store: Store) -> tuple[dict, dict]:
    """:func:`stored_scores` and the alerts: ``(kind, stream, subject)`` to ``(score,
    n_documents, related_ids)``."""
    alerts = {
        (a["kind"], a["stream"], a["subject_id"]): (
            a["score"],
            a["n_documents"],
            tuple(a["related_ids"] or ()),
        )
        for a in store.alerts(limit=None)
    }
    return stored_scores(store), alerts


def assert_same_results(a: tuple[dict, dict], b: tuple[dict, dict]) -> None:
    """Same documents, flags and scores (within 1e-6), and the same alerts: a restart may
    neither lose nor add one (documents read again once raised alerts of their own)."""
    assert_same(a[0], b[0])
    assert a[1].keys() == b[1].keys(), set(a[1]) ^ set(b[1])
    for key, (score, n_documents, related) in a[1].items():
        other = b[1][key]
        assert (n_documents, related) == other[1:], key
        assert abs(score - other[0]) <= 1e-6, (key, score, other[0])


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        (sa, na), (sb, nb) = a[key], b[key]
        assert na == nb, key
        assert (sa is None and sb is None) or abs(sa - sb) <= 1e-6, (key, sa, sb)
