"""The anomaly worker against a real broker: scores messages as the detector sends them, a worker
loop on a thread, and the anomaly scores it stored."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable

from sparsewatch.consumers.kafka_client import ensure_topics, make_producer
from sparsewatch.consumers.worker import WorkerLoop
from sparsewatch.storage.store import Store


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


def window(stream: str, seq: int, n: int = 10) -> list[tuple[str, bytes]]:
    return [(stream, scores_message(stream, seq, i, n, tag=stream)) for i in range(n)]


def produce(bootstrap: str, topic: str, messages: list[tuple[str, bytes]]) -> None:
    ensure_topics(bootstrap, {topic: 1})
    producer = make_producer(bootstrap)
    for key, value in messages:
        producer.produce(topic, key=key.encode(), value=value)
    assert producer.flush(30) == 0


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
