"""Resource bounds of the worker loop in the number of streams and the length of the stream, with
a real broker and real databases (SQLite, and PostgreSQL when configured).

* a quiet stream with windows since its checkpoint is checkpointed after the idle timeout, so it
  no longer holds its partition's resume offset back (a crash replayed everything the partition
  had carried since the stream's last checkpoint);
* the states of quiet, checkpointed streams leave memory beyond ``max_idle_states`` (every stream
  ever seen stayed resident), and a stream restored from its checkpoint continues exactly as one
  that stayed in memory.
"""

from __future__ import annotations

import uuid

import pytest
from sparsewatch.consumers.anomaly_worker import AnomalyStreamState
from sparsewatch.consumers.score_messages import parse_scored
from sparsewatch.storage.store import Store

from sparsewatch.config import Config, load_config
from sparsewatch.runner import build_worker
from tests.support.anomaly_worker import anomaly_scores, produce, wait, window
from tests.support.worker_stubs import Running

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _config(bootstrap: str, url: str) -> Config:
    env = {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": f"scale-{uuid.uuid4().hex[:8]}",
        "SPARSEWATCH_KAFKA_PARTITIONS": "1",
        "SPARSEWATCH_DATABASE_URL": url,
        "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "1",
        "SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY": "10",
        "SPARSEWATCH_MAX_IDLE_STREAMS": "3",
        "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "10",
        "SPARSEWATCH_ANOMALY_REFIT_EVERY_WINDOWS": "2",
    }
    return load_config(env=env)


def _offline(config: Config, messages: list[tuple[str, bytes]]) -> dict[str, float]:
    """The anomaly scores of ``messages`` with every stream's state kept in memory."""
    states: dict[str, AnomalyStreamState] = {}
    scores: dict[str, float] = {}
    for offset, (stream, raw) in enumerate(messages):
        state = states.setdefault(stream, AnomalyStreamState(stream, config, None))
        for out in state.add(parse_scored(raw), 0, offset, 0.0):
            for name, args in out.calls:
                if name == "upsert_anomaly_scores":
                    scores.update({r["doc_id"]: r["anomaly_score"] for r in args[0]})
    return scores


def test_a_quiet_stream_neither_holds_back_the_resume_offset_nor_stays_in_memory(
    kafka_bootstrap, database_url
):
    """Stream ``quiet`` sends one window and falls silent; 12 streams then send one window each
    and fall silent too. With ``checkpoint_every = 10`` none of them had a checkpoint due, so
    the stored resume offset stayed at ``quiet``'s first message (0) for as long as the worker
    ran (a crash replayed the partition from there), and all 13 states stayed in memory. Now
    each is checkpointed after the 1 s idle timeout, the resume offset follows the input, and
    at most ``max_idle_states`` (3) quiet states stay resident. ``quiet`` then speaks again
    (a re-sent copy of an old message, and a new window): restored from its checkpoint, its
    scores are exactly those of a state that stayed in memory."""
    config = _config(kafka_bootstrap, database_url)
    topic = config.kafka.topic("scores")
    group = f"{config.kafka.group_id}.anomaly"
    sent = window("quiet", 0)
    store = Store.open(database_url)
    try:
        produce(kafka_bootstrap, topic, sent)
        worker = build_worker("anomaly", config, store)
        assert worker.max_idle_states == 3  # max_idle_streams from the configuration
        running = Running(worker)
        try:
            assert wait(lambda: store.partition_offsets(group, topic).get(0) == len(sent))
            others = [m for s in range(12) for m in window(f"s{s:02d}", 0)]
            produce(kafka_bootstrap, topic, others)
            sent += others
            assert wait(lambda: store.partition_offsets(group, topic).get(0) == len(sent))
            assert wait(lambda: len(worker.streams_in_memory) <= 3)
            assert "quiet" not in worker.streams_in_memory
            back = [sent[3], *window("quiet", 1, 12)]
            produce(kafka_bootstrap, topic, back)
            sent += back
            assert wait(lambda: len(anomaly_scores(store)) == 13 * 10 + 12)
        finally:
            running.stop()
        stored = anomaly_scores(store)
    finally:
        store.dispose()
    expected = _offline(config, sent)
    assert stored.keys() == expected.keys()
    for doc, score in expected.items():
        assert stored[doc] == pytest.approx(score, abs=1e-9)
