"""An emerging topic is reported by its raw volume ``S w`` and that volume's rise.

The alert reported the Hodrick-Prescott trend ``F S w`` as the volume history and its last
difference as the score: a story present only in the last window (raw volumes 0.49 0.22 0.54
0.47 0.42 0.55 18.56) was reported as trend -1.95 -0.74 0.58 2.2 4.29 6.91 9.96, slope 3.05:
negative volumes and a rise over seven windows that never happened."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sparsewatch.consumers.detector_core import build_models, process_window
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.windowing import Buffered, ClosedWindow
from sparsewatch.models.dynamic_nmf import DynamicNMF, hp_smoother

from sparsewatch.config import DetectorConfig


def _matrices(seed: int, n_steps: int) -> list[sp.csr_matrix]:
    """80 documents a time point on four old stories; a new story (terms 50-57) in 20 documents
    of the last time point only."""
    rng = np.random.default_rng(seed)
    old = [rng.choice(50, 8, replace=False) for _ in range(4)]
    steps = []
    for t in range(n_steps):
        rows = []
        for i in range(80):
            terms = np.arange(50, 58) if t == n_steps - 1 and i < 20 else old[i % 4]
            x = np.zeros(60)
            x[rng.choice(terms, 6, replace=False)] = rng.random(6) + 0.5
            x[rng.integers(0, 60, 2)] += 0.2
            rows.append(x / x.sum())
        steps.append(sp.csr_matrix(np.array(rows)))
    return steps


def test_event_reports_the_raw_volume_and_its_rise() -> None:
    model = DynamicNMF(10, n_emerging=1, max_topics=30, random_state=0)
    for X in _matrices(0, 8):
        model.partial_fit(X)
    (event,) = model.events_
    i = int(np.flatnonzero(model.topic_ids_ == event.topic_id)[0])
    # S w by hand: each window document's weight, counted for the documents it stands for,
    # summed per time point of the window (omega = 7 of the 8)
    first = model.n_steps_ - model.window
    volume = np.bincount(
        model.doc_times_ - first,
        weights=model.doc_weights_ * model.weights_[:, i],
        minlength=model.window,
    )
    np.testing.assert_allclose(event.volume, volume, rtol=1e-12, atol=1e-12)
    assert min(event.volume) >= 0.0
    assert event.volume[-1] > 15 and max(event.volume[:-1]) < 2  # the story: last point only
    assert event.rise == event.volume[-1] - event.volume[-2]
    assert event.rise > 15  # the real jump (the trend's slope said 3.05)
    assert np.isclose(event.strength, event.volume[-1], rtol=1e-12)
    # the trend stays the hinge's smoothed volume
    F = hp_smoother(model.window, model.hp_lambda)
    np.testing.assert_allclose(event.trend, F @ volume, rtol=1e-10, atol=1e-10)
    assert event.slope == event.trend[-1] - event.trend[-2]


def test_window_of_one_time_point_rises_by_its_whole_volume() -> None:
    model = DynamicNMF(10, n_emerging=1, window=1, max_topics=30, random_state=0)
    for X in _matrices(1, 3):
        model.partial_fit(X)
    (event,) = model.events_
    assert len(event.volume) == 1 and event.rise == event.volume[0] > 15
    assert np.isclose(event.strength, event.volume[0], rtol=1e-12)


WORDS = [f"qx{chr(97 + a)}{chr(97 + b)}" for a in range(26) for b in range(26)]


def _texts(rng: np.random.Generator, n: int, stories: list[list[str]]) -> list[str]:
    texts = []
    for i in range(n):
        story = stories[i % len(stories)]
        words = list(rng.choice(story, 6, replace=False)) + list(rng.choice(WORDS[200:], 2))
        texts.append(" ".join(words))
    return texts


def _window(seq: int, texts: list[str]) -> ClosedWindow:
    items = [
        Buffered(Document(f"{seq}-{i}", text, seq * 1000 + i, "s"), 0, seq * 1000 + i)
        for i, text in enumerate(texts)
    ]
    return ClosedWindow("s", seq, seq * 1000, (seq + 1) * 1000, items, "count")


def test_the_alert_scores_the_raw_rise_and_lists_the_raw_volumes() -> None:
    rng = np.random.default_rng(3)
    old = [list(WORDS[8 * k : 8 * k + 8]) for k in range(4)]
    new = list(WORDS[100:108])
    config = DetectorConfig(warmup_documents=150)
    models = build_models(config)
    for seq in range(7):
        texts = _texts(rng, 150, old)
        if seq == 6:  # the new story in the last window only
            texts[:30] = _texts(rng, 30, [new])
        comp = process_window(models, _window(seq, texts), config)
    alerts = [
        a
        for a in comp.alerts
        if a["kind"] == "emerging_topic" and set(new) & {t for t, _ in a["terms"][:3]}
    ]
    assert len(alerts) == 1
    alert = alerts[0]
    event = next(
        e
        for e in models.emerging.events_
        if f"topic-{models.emerging_id_base + e.topic_id}" == alert["subject_id"]
    )
    assert alert["score"] == event.rise
    summary = alert["summary"]
    assert f"rise {event.rise:.3g}" in summary
    volume = [float(v) for v in summary.split("volume ")[1].split(")")[0].split()]
    np.testing.assert_allclose(volume, event.volume, rtol=5e-3, atol=1e-12)
    assert min(volume) >= 0.0
    assert volume[-1] >= 15 and max(volume[:-1]) < 1  # the story: last window only
    assert alert["score"] > 15  # the real jump (the smoothed trend's slope was 3.6 here)
