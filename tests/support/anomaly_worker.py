"""The anomaly worker against a real broker: scores messages as the detector sends them, a topic
of them, a stream's state restored from its checkpoint, a worker loop on a thread, and the anomaly
scores it stored."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from sparsewatch.consumers.anomaly_worker import AnomalyStreamState
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.worker import WorkerLoop
from sparsewatch.storage.store import Checkpoint, Store

from sparsewatch.config import Config


def scores_message(stream: str, seq: int, i: int, n: int, tag: str) -> bytes:
    """A message of ``<prefix>.scores`` as the detector sends it (document ``i`` of ``n``)."""
    rng = random.Random(f"{stream}{seq}{i}{tag}")
    atoms = rng.randrange(1, 5)
    return json.dumps(
        {
            "stream": stream,
            "doc_id": f"{seq}-{tag}-{i}",
            "window_seq": seq,
            "index": i,
            "n": n,
            "timestamp": 1_700_000_000_000 + 1000 * seq + i,
            "score": rng.uniform(0.2, 1.0),
            "reconstruction_error": rng.uniform(0.1, 0.9),
            "novel": False,
            "code_index": list(range(atoms)),
            "code_value": [rng.uniform(0.05, 0.5) for _ in range(atoms)],
            "n_terms": rng.randrange(5, 20),
        }
    ).encode()


def window_message(seq: int, i: int, n: int) -> bytes:
    """Document ``i`` of ``n`` of window ``seq`` of stream ``s`` as the detector sends it, its
    values fixed by ``i`` (its id ``seq-i``: a larger version of a window holds the smaller one's
    documents first)."""
    return json.dumps(
        {
            "stream": "s",
            "doc_id": f"{seq}-{i}",
            "window_seq": seq,
            "index": i,
            "n": n,
            "timestamp": 1_700_000_000_000 + 1000 * seq + i,
            "score": 0.3 + 0.05 * (i % 7),
            "reconstruction_error": 0.2 + 0.03 * (i % 5),
            "novel": False,
            "code_index": list(range(1 + i % 3)),
            "code_value": [0.1 + 0.02 * i] * (1 + i % 3),
            "n_terms": 5 + i,
        }
    ).encode()


def window(stream: str, seq: int, n: int = 10) -> list[tuple[str, bytes]]:
    return [(stream, scores_message(stream, seq, i, n, tag=stream)) for i in range(n)]


def produce(bootstrap: str, topic: str, messages: list[tuple[str, bytes]]) -> None:
    ensure_topics(bootstrap, {topic: 1})
    producer = make_producer(bootstrap)
    for key, value in messages:
        producer.produce(topic, key=key.encode(), value=value)
    assert producer.flush(30) == 0


def scores_topic(
    bootstrap: str, tmp_path: Path, name: str, sent: list[bytes], idle_timeout_s: str
) -> tuple[str, str, str, dict[str, str]]:
    """A fresh ``<prefix>.scores`` topic holding ``sent`` (keyed by stream), and the anomaly
    worker's prefix, SQLite URL, that topic and its environment."""
    prefix = f"{name}-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'anomaly.db'}"
    env = {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
        "SPARSEWATCH_KAFKA_GROUP_ID": prefix,
        "SPARSEWATCH_DATABASE_URL": url,
        "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": idle_timeout_s,
    }
    topic = f"{prefix}.scores"
    ensure_topics(bootstrap, {topic: 1})
    producer = make_producer(bootstrap)
    for raw in sent:
        producer.produce(topic, key=json.loads(raw)["stream"].encode(), value=raw)
    assert producer.flush(30) == 0
    return prefix, url, topic, env


def restore(
    state: AnomalyStreamState, config: Config, drop: tuple[str, ...] = ()
) -> AnomalyStreamState:
    """Stream ``s``'s state restored under ``config`` from ``state``'s checkpoint, without its
    arrays ``drop`` (as an older version wrote it)."""
    arrays, meta = state.checkpoint()
    arrays = {k: v for k, v in arrays.items() if k not in drop}
    return AnomalyStreamState("s", config, Checkpoint("g", "s", arrays, meta, None))


def wait(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return False


def anomaly_scores(store: Store) -> dict[str, float]:
    return {
        r["doc_id"]: r["anomaly_score"]
        for r in store.documents(limit=None)
        if r["anomaly_score"] is not None
    }


class Running:
    """A worker loop running on a thread until :meth:`stop`."""

    def __init__(self, worker: WorkerLoop) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:  # re-raised by stop()
            self.error = exc

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(60)
        if self.error is not None:
            raise self.error
