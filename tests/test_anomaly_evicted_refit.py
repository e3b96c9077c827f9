"""A model refitted on restore for changed settings, in a stream that leaves memory when idle,
with a real broker and SQLite.

A restored model fitted with another ``anomaly.n_atoms``, ``sparsity`` or ``contamination`` is
refitted at once, with a warning (``consumers/anomaly_worker.py``). A stream whose only messages
after the restore were re-sends of processed windows produced nothing, so its refitted state was
never checkpointed: dropped from memory as a quiet stream (``max_idle_streams``), it was restored
from the old checkpoint and refitted again, with the same warning, at each of its next messages.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from sparsewatch.consumers.anomaly_worker import AnomalyStreamState
from sparsewatch.consumers.score_messages import parse_scored
from sparsewatch.storage.store import Checkpoint, Store

from sparsewatch.config import Config, load_config
from sparsewatch.runner import build_worker
from tests.support.anomaly_worker import anomaly_scores, produce, wait, window
from tests.support.worker_stubs import Running

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

REFIT_WARNING = "its checkpointed model was fitted with"


def _config(bootstrap: str, url: str, prefix: str, n_atoms: int) -> Config:
    """One partition, every quiet stream dropped from memory after 1 s, refits only on restore."""
    env = {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
        "SPARSEWATCH_KAFKA_PARTITIONS": "1",
        "SPARSEWATCH_DATABASE_URL": url,
        "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "1",
        "SPARSEWATCH_MAX_IDLE_STREAMS": "0",
        "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "10",
        "SPARSEWATCH_ANOMALY_REFIT_EVERY_WINDOWS": "1000",
        "SPARSEWATCH_ANOMALY_REFIT_DRIFT_P": "0",
        "SPARSEWATCH_ANOMALY_N_ATOMS": str(n_atoms),
    }
    return load_config(env=env)


def _expected(
    old: Config, new: Config, before: list[tuple[str, bytes]], after: list[tuple[str, bytes]]
) -> tuple[dict[str, float], set[str]]:
    """The scores and flagged documents of ``before`` under ``old``, then, restored from a
    checkpoint under ``new``, of ``after``, the state kept in memory otherwise."""
    scores: dict[str, float] = {}
    flagged: set[str] = set()

    def feed(state: AnomalyStreamState, messages: list[tuple[str, bytes]], first: int) -> None:
        for offset, (_, raw) in enumerate(messages, first):
            for out in state.add(parse_scored(raw), 0, offset, 0.0):
                for name, args in out.calls:
                    if name == "upsert_anomaly_scores":
                        scores.update({r["doc_id"]: r["anomaly_score"] for r in args[0]})
                        flagged.update(r["doc_id"] for r in args[0] if r["anomaly"])

    state = AnomalyStreamState("s", old, None)
    feed(state, before, 0)
    st, meta = state.checkpoint()
    feed(AnomalyStreamState("s", new, Checkpoint("g", "s", st, meta, None)), after, len(before))
    return scores, flagged


def test_a_stream_refitted_on_restore_is_not_refitted_again_after_it_left_memory(
    kafka_bootstrap, tmp_path: Path, caplog
):
    """Stream ``s`` is fitted with 8 atoms and checkpointed. Restarted with ``n_atoms`` 4, the
    worker reads a re-sent message of ``s``: restored, refitted with a warning, and, quiet,
    dropped from memory. Its checkpoint now records the 4 atoms it was refitted with, so a
    second re-send and a new window restore it without a refit or a warning (each restore
    refitted it again, from the checkpoint of 8 atoms). The scores written are exactly those
    of a state kept in memory, once per document."""
    url = f"sqlite:///{tmp_path / 'anomaly.db'}"
    prefix = f"evicted-refit-{uuid.uuid4().hex[:8]}"
    old = _config(kafka_bootstrap, url, prefix, n_atoms=8)
    new = _config(kafka_bootstrap, url, prefix, n_atoms=4)
    topic = old.kafka.topic("scores")
    group = f"{old.kafka.group_id}.anomaly"
    before = [m for seq in range(3) for m in window("s", seq)]
    store = Store.open(url)
    try:
        produce(kafka_bootstrap, topic, before)
        running = Running(build_worker("anomaly", old, store))
        try:
            assert wait(lambda: store.partition_offsets(group, topic).get(0) == len(before))
        finally:
            running.stop()
        assert int(store.load_checkpoint(group, "s").state["fitted_n_atoms"]) == 8
        sent = list(before)
        worker = build_worker("anomaly", new, store)
        with caplog.at_level(logging.WARNING):
            running = Running(worker)
            try:
                for resent in (before[3], before[15]):
                    produce(kafka_bootstrap, topic, [resent])
                    sent.append(resent)
                    assert wait(lambda: store.partition_offsets(group, topic).get(0) == len(sent))
                    assert wait(lambda: "s" not in worker.streams_in_memory)
                    checkpoint = store.load_checkpoint(group, "s")
                    assert int(checkpoint.state["fitted_n_atoms"]) == 4
                after = window("s", 3)
                produce(kafka_bootstrap, topic, after)
                sent += after
                assert wait(lambda: len(anomaly_scores(store)) == 40)
            finally:
                running.stop()
        refits = [r for r in caplog.records if REFIT_WARNING in r.getMessage()]
        assert len(refits) == 1, [r.getMessage() for r in refits]
        rows = store.documents(limit=None)
        alerts = store.alerts(limit=None)
    finally:
        store.dispose()
    scores, flagged = _expected(old, new, before, sent[len(before) :])
    assert len(rows) == len(scores) == 40
    assert {r["doc_id"]: r["anomaly_score"] for r in rows} == scores  # exactly, bit for bit
    assert {r["doc_id"] for r in rows if r["anomaly"]} == flagged
    assert sorted(a["subject_id"] for a in alerts) == sorted(flagged)
