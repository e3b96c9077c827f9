"""The README's main job: the demo runs end to end against a real broker and stores results."""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa
from sparsewatch.replay.evaluate import roc_auc
from sparsewatch.storage.store import Store

from sparsewatch.demo import MALFORMED, run_demo
from tests.support.demo import demo_config


def _novel_by_window(docs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Scores of the scored documents and whether each is novel: none of its stories (labels)
    appeared in an earlier window (the evaluation's rule 'none', by the stored windows), from the
    second window on."""
    by_window: dict[int, list[dict]] = {}
    for d in docs:
        by_window.setdefault(d["window_seq"], []).append(d)
    seen: set[str] = set()
    scores, novel = [], []
    for i, seq in enumerate(sorted(by_window)):
        for d in by_window[seq]:
            if i > 0 and d["novelty_score"] is not None:  # the first window has no past
                scores.append(d["novelty_score"])
                novel.append(not set(d["labels"]) & seen)
        for d in by_window[seq]:
            seen.update(d["labels"])
    return np.array(scores), np.array(novel)


def test_demo_end_to_end(kafka_bootstrap, tmp_path):
    result = run_demo(
        demo_config(kafka_bootstrap, tmp_path), n_documents=1500, out_dir=tmp_path / "demo"
    )
    assert result.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.plot.stat().st_size > 10_000  # a drawn figure, not an empty canvas
    with Store.open(result.database_url) as store:
        docs = store.documents(limit=None)
        novel_alerts = store.alerts(kinds=["novel_document"], limit=None)
        anomaly_alerts = store.alerts(kinds=["anomaly"], limit=None)
        with store.reading() as conn:
            dead = conn.execute(sa.text("select reason from dead_letters")).scalars().all()
    assert len(docs) == 1500
    assert len({(d["stream"], d["doc_id"]) for d in docs}) == 1500
    # Every document is scored except the warm-up window's; the alerts, one per story, stand
    # for the flagged documents.
    unscored = {d["window_seq"] for d in docs if d["novelty_score"] is None}
    assert len(unscored) <= 1 and all(
        d["window_seq"] > max(unscored, default=-1) for d in docs if d["novelty_score"] is not None
    )
    flagged = {d["doc_id"] for d in docs if d["novel"]}
    alerted = [d for a in novel_alerts for d in (a["subject_id"], *a["related_ids"])]
    assert flagged and sorted(alerted) == sorted(flagged)
    assert any(d["anomaly_score"] is not None for d in docs)
    assert {a["subject_id"] for a in anomaly_alerts} == {d["doc_id"] for d in docs if d["anomaly"]}
    # The stories born during the stream score above the known ones (ROC AUC, rule 'none').
    scores, novel = _novel_by_window(docs)
    assert 0 < novel.sum() < novel.size
    assert roc_auc(novel, scores) > 0.75
    assert len(dead) == result.n_malformed == len(MALFORMED)
    assert all(dead)
