"""Late documents do not force a checkpoint of their stream.

At the end of every batch the worker loop asks each stream's state for the windows its idle timer
closes (``close_idle``), which also hands over the late documents waiting. Everything it returned
forced a checkpoint of the stream, as a window closed by the idle timer must have (the wall
clock closed it: no replay would recompute it): so every batch holding a late document wrote the
stream's whole model state (10-250 MB for a detector stream), whatever
``windows.checkpoint_every`` said. Late documents leave the stream dirty for the usual schedule
instead: here a checkpoint after the tenth window, and one when the stream goes quiet.

The detector worker's loop, fed batches by hand, with its real thread writer (the broker for its
score messages, a SQLite store).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.writer import Pending, ThreadWriter, WriteJob
from sparsewatch.storage.schema import documents
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from sparsewatch.runner import build_worker
from tests.support.gated_writer import feed, finish

pytestmark = pytest.mark.kafka

WINDOW_MS = 10_000
T0 = 1_700_000_000_000  # (in the past: the idle timer closes the last window once quiet)
TEXTS = ["storm", "market", "court", "election", "flood", "bridge", "harvest", "strike"]


class _CheckpointCounting(ThreadWriter):
    """The thread writer, counting the checkpoints of the jobs it is handed."""

    checkpoints = 0

    def submit(self, job: WriteJob) -> Pending:
        self.checkpoints += len(job.checkpoints)
        return super().submit(job)


def _message(topic: str, offset: int, doc_id: str, ts: int) -> Message:
    text = f"{TEXTS[offset % len(TEXTS)]} report number {offset}"
    value = json.dumps({"id": doc_id, "stream": "s", "text": text, "timestamp": ts}).encode()
    return Message(
        topic=topic,
        partition=0,
        offset=offset,
        key=b"s",
        value=value,
        timestamp=(TIMESTAMP_CREATE_TIME, ts),
    )


def test_batches_of_late_documents_leave_their_stream_to_the_checkpoint_schedule(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "SPARSEWATCH_KAFKA_TOPIC_PREFIX": f"latecp-{uuid.uuid4().hex[:8]}",
            "SPARSEWATCH_KAFKA_PARTITIONS": "1",
            "SPARSEWATCH_ANOMALY_ENABLED": "false",
            "SPARSEWATCH_WINDOWS_SIZE": "10s",
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "1",
            "SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY": "10",
            "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "4",
            "SPARSEWATCH_DETECTOR_MAX_ATOMS": "20",
            "SPARSEWATCH_DETECTOR_NEW_ATOMS_PER_WINDOW": "0",
        }
    )
    k = config.kafka
    ensure_topics(kafka_bootstrap, {k.topic(t): 1 for t in ("docs", "scores", "dlq")})
    topic = k.topic("docs")
    # a document in each of 12 windows (11 close by the watermark), then 20 late documents of
    # window 0, one a batch; the loop's clock stays within the idle timeout
    messages = [_message(topic, i, f"w{i}", T0 + i * WINDOW_MS) for i in range(12)]
    messages += [_message(topic, 12 + i, f"late{i}", T0 + 1 + i) for i in range(20)]
    with Store.open(f"sqlite:///{tmp_path / 'late.db'}") as store:
        worker = build_worker("detector", config, store)
        writer = _CheckpointCounting(store, worker.destination, "detector")
        worker._writer = writer
        feed(worker, messages[:12], batch=1)
        assert writer.checkpoints == 1  # with the tenth window
        feed(worker, messages[12:], batch=1)
        assert writer.checkpoints == 1  # (was 21: one per batch holding a late document)
        assert "s" in worker._dirty  # left to the schedule: the late ids are not checkpointed
        finish(worker)  # quiet: the last window closes by the idle timer, checkpointed with it
        assert writer.checkpoints == 2
        with store.reading() as conn:
            rows = conn.execute(sa.select(documents.c.doc_id, documents.c.late)).all()
        stored_late = sorted(doc_id for doc_id, late in rows if late)
        assert stored_late == sorted(f"late{i}" for i in range(20))
        assert len(rows) == 32
        assert store.partition_offsets(f"{k.group_id}.detector", topic) == {0: 32}
