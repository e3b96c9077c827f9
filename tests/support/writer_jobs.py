"""A writer's destination topics, one window's write job (documents, score messages, a dead letter,
a checkpoint, offsets), its outcome, and what such jobs leave in the store (or that they left
nothing)."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.writer import Destination, Pending, WriteJob, WriterError
from sparsewatch.storage.store import Store

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def destination(bootstrap: str) -> Destination:
    prefix = f"writer-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {f"{prefix}.scores": 1, f"{prefix}.dlq": 1})
    return Destination(bootstrap, "g", f"{prefix}.docs", f"{prefix}.scores", f"{prefix}.dlq")


def write_job(n: int = 50, bad_row: bool = False) -> WriteJob:
    docs = [
        {
            "stream": "s",
            "doc_id": f"d{i}",
            "event_time": T0 + timedelta(minutes=i),
            "window_seq": 0,
            "novelty_score": np.float32(i / n),
            "reconstruction_error": np.float64(i / (2 * n)),
            "novel": i % 10 == 0,
            "top_atoms": np.array([i % 7, 3], dtype=np.int64),
            "labels": ["x"],
            "text": f"document {i} with ünïcode",
        }
        for i in range(n)
    ]
    if bad_row:
        docs[-1]["event_time"] = None  # refused by StoreTx.insert_documents
    window = ("s", 0, T0, T0 + timedelta(hours=1), n, 0.5, {"score": 0.1}, "watermark")
    return WriteJob(
        calls=[("upsert_window", window), ("insert_documents", (docs,))],
        messages=[[(f"s:{d['doc_id']}", f"score {i}".encode()) for i, d in enumerate(docs)]],
        dead=[
            {"topic": "t", "partition": 0, "offset": 7, "reason": "invalid JSON", "payload": b"{"}
        ],
        checkpoints={"s": ({"A": np.eye(3, dtype=np.float32)}, {"w": 0})},
        offsets={0: 51},
    )


class OutcomeWaiter:
    """A thread that waits for a job's result or error from the moment it is made."""

    def __init__(self, pending: Pending) -> None:
        self._pending = pending
        self._got: list[BaseException | float] = []
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        try:
            self._got.append(self._pending.result())
        except WriterError as exc:
            self._got.append(exc)

    def outcome(self, within_s: float) -> BaseException | float | None:
        """The job's result or error, None if it has not come within ``within_s`` more."""
        self._thread.join(within_s)
        return self._got[0] if self._got else None


def job_outcome(pending: Pending, within_s: float) -> BaseException | float | None:
    """The job's result or error, None if it has not come within ``within_s``."""
    return OutcomeWaiter(pending).outcome(within_s)


def contents(store: Store, input_topic: str) -> tuple:
    docs = sorted(
        (d["doc_id"], d["novelty_score"], d["novel"], tuple(d["top_atoms"]), d["text"])
        for d in store.documents(limit=None)
    )
    windows = [(w["stream"], w["window_seq"], w["n_documents"]) for w in store.windows()]
    checkpoint = store.load_checkpoint("g", "s")
    offsets = store.partition_offsets("g", input_topic)
    return docs, windows, checkpoint.meta if checkpoint else None, offsets


def stored_nothing(url: str) -> bool:
    """Whether the database at ``url`` holds no document and no window (no job committed)."""
    with Store.open(url) as store:
        return store.documents(limit=None) == [] and store.windows() == []
