"""The detector under non-default configurations, built by the real loader: combinations of
novelty rule, caps, topic models and block sizes run on real text (Reuters-21578) and adversarial
windows without an exception, with finite scores, flags that follow the configured rule, model
shapes that agree, and a checkpoint (npz, as stored) after every window that continues with
identical results; plus the warm-up crashes such combinations found."""

from __future__ import annotations

import gzip
import json
import math
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from sparsewatch.consumers.detector_core import (
    StreamModels,
    WindowComputation,
    build_models,
    process_window,
)
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.windowing import Buffered, ClosedWindow
from sparsewatch.storage.serialization import arrays_to_npz, npz_to_arrays

from sparsewatch.config import DetectorConfig, load_config

REUTERS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "reuters21578.jsonl.gz"


def _config(**options: object) -> DetectorConfig:
    env = {f"SPARSEWATCH_DETECTOR_{k.upper()}": str(v) for k, v in options.items()}
    return load_config(env=env).detector


def _window(seq: int, texts: list[str]) -> ClosedWindow:
    items = [
        Buffered(Document(f"d{seq}-{i}", t, seq * 10_000 + i, "s"), 0, seq * 10_000 + i)
        for i, t in enumerate(texts)
    ]
    return ClosedWindow("s", seq, seq * 10_000, seq * 10_000 + 10_000, items, "count")


def _round_trip(models: StreamModels, config: DetectorConfig) -> StreamModels:
    """The models as a restarted worker gets them: state -> npz blob -> fresh models."""
    return build_models(config).set_state(npz_to_arrays(arrays_to_npz(models.get_state())))


# ---------------------------------------------------------------- warm-up crashes (regressions)


def test_a_warm_up_whose_kept_terms_are_all_out_of_the_capped_vocabulary_waits() -> None:
    """max_vocabulary 1 keeps the commonest term; max_terms_per_doc 1 keeps each document's
    rarest (out of the vocabulary): no warm-up document had a vocabulary term left, and the
    dictionary's initialisation raised "no document has a term" (the worker stopped on every
    restart). The warm-up starts over, as when no text has a term at all."""
    config = _config(max_vocabulary=1, max_terms_per_doc=1, warmup_documents=2)
    models = build_models(config)
    first = process_window(models, _window(0, ["reuter alpha", "reuter beta"]), config)
    assert not models.detector.fitted and len(first.documents.doc_id) == 2
    process_window(models, _window(1, ["reuter", "reuter reuter"]), config)
    assert models.detector.fitted  # the next warm-up has a term: the dictionary is built
    result = process_window(models, _window(2, ["reuter gamma", "reuter"] * 10), config)
    assert np.isfinite(result.documents.novelty_score).all()


def test_a_block_bounded_initialisation_whose_last_documents_are_empty_still_fits() -> None:
    """max_step_documents 1: the initialisation used the warm-up's last document only, and an
    empty one raised "no document has a term" although the others had terms."""
    config = _config(max_step_documents=1, warmup_documents=3, initial_atoms=2)
    models = build_models(config)
    process_window(models, _window(0, ["quake hits the coast", "coast guard rescues", ""]), config)
    assert models.detector.fitted
    assert models.detector.model.components_.shape[1] == 1  # one document with a term was used
    result = process_window(models, _window(1, ["quake again on the coast", "new story"]), config)
    assert np.isfinite(result.documents.novelty_score).all()


def test_max_atoms_caps_the_initial_dictionary_without_growth() -> None:
    """README: the warm-up learns at most ``max_atoms`` atoms. With growth off
    (new_atoms_per_window 0) the model ignored its cap, and 200 atoms were learnt with
    max_atoms 3."""
    config = _config(max_atoms=3, new_atoms_per_window=0, warmup_documents=30)
    texts = [f"story{i % 10} about topic{i % 7} and thing{i}" for i in range(60)]
    models = build_models(config)
    process_window(models, _window(0, texts[:30]), config)
    process_window(models, _window(1, texts[30:]), config)
    assert models.detector.model.components_.shape[1] == 3


# ---------------------------------------------------------------- seeded combinations


def _reuters_texts() -> list[str]:
    if not REUTERS.exists():
        pytest.skip(f"{REUTERS} is absent (the shared data folder holds Reuters-21578)")
    with gzip.open(REUTERS, "rt", encoding="utf-8") as fh:
        docs = [json.loads(line) for _, line in zip(range(1500), fh, strict=False)]
    return [f"{d['title']} {d['body']}".strip() for d in docs]


ADVERSARIAL = {
    "one": lambda rng, texts: [texts[rng.randrange(len(texts))]],
    "identical": lambda rng, texts: [texts[rng.randrange(len(texts))]] * 30,
    "empty": lambda rng, texts: ["", "  ", "123 4.5"] * 5,
    "unknown words": lambda rng, texts: [f"zq{rng.randrange(10**9)}x zz{i}q" for i in range(12)],
    "non-latin": lambda rng, texts: ["東京 証券 取引所 株価 上昇", "مرحبا أخبار عاجلة اليوم"] * 6,
    "long": lambda rng, texts: [" ".join(texts[:40])[:60_000]] * 2,
}

COMBOS = [
    {"novel_mode": "threshold", "novel_threshold": 0, "max_vocabulary": 40, "topics": "false"},
    {"novel_mode": "top_q", "novel_top_q": 1, "max_atoms": 5, "new_atoms_per_window": 0},
    {
        "novel_top_q": 0.001,
        "max_terms_per_doc": 2,
        "max_vocabulary": 8,
        "emerging_max_documents": 5,
    },
    {
        "novel_mode": "threshold",
        "novel_threshold": 1e9,
        "max_step_documents": 7,
        "n_topics": 1,
        "max_topics": 2,
        "emerging_per_window": 1,  # (below max_topics: at it no topic would be tracked)
        "emerging_min_documents": 0,
        "emerging_repeat_windows": 0,
    },
    {
        "score_margin": "false",
        "initial_atoms": 1,
        "max_atoms": 2,
        "new_atoms_per_window": 1,
        "emerging_topics": "false",
        "topic_reseeds_per_window": 5,
        "max_token_chars": 3,
    },
    {
        "novel_top_q": 0.3333,
        "max_vocabulary": 1,
        "max_terms_per_doc": 1,
        "snapshot_every": 1,
        "warmup_documents": 1,
    },
]


@pytest.mark.parametrize("case", range(len(COMBOS)))
def test_seeded_configuration_combinations_keep_their_invariants(case: int) -> None:
    texts = _reuters_texts()
    rng = random.Random(case)
    options = {"warmup_documents": 40, "initial_atoms": 20, "n_topics": 3, "max_topics": 6}
    options.update(COMBOS[case])
    config = _config(**options)
    models, twin = build_models(config), build_models(config)
    at = rng.randrange(len(texts) - 600)
    kinds = list(ADVERSARIAL)
    for seq in range(6):
        if seq % 2 == 0 or not models.detector.fitted:
            n = rng.choice([50, 120])
            window = texts[at : at + n]
            at += n
        else:
            window = ADVERSARIAL[kinds[(seq + case) % len(kinds)]](rng, texts)
        twin = _round_trip(twin, config)  # a checkpoint after every window
        warm = models.detector.fitted  # (the window that ends the warm-up is scored, not flagged)
        got = process_window(models, _window(seq, window), config)
        again = process_window(twin, _window(seq, window), config)
        assert json.dumps(got.documents.rows(), default=str) == json.dumps(
            again.documents.rows(), default=str
        )
        assert got.alerts == again.alerts and got.topics == again.topics
        assert len(got.documents.doc_id) == len(window)
        _assert_one_story_per_flagged_document(got)
        if not warm:
            assert not got.documents.novel.any()
        if models.detector.fitted:
            _assert_flags_follow_the_rule(got, config, warm)
            _assert_shapes_agree(models, got, config, len(window))


def _assert_one_story_per_flagged_document(got: WindowComputation) -> None:
    docs = got.documents
    novel_alerts = [a for a in got.alerts if a["kind"] == "novel_document"]
    stories = [{a["subject_id"], *a["related_ids"]} for a in novel_alerts]
    assert [len(s) for s in stories] == [a["n_documents"] for a in novel_alerts]
    flagged = {d for d, n in zip(docs.doc_id, docs.novel, strict=True) if n}
    assert set().union(*stories) == flagged and sum(map(len, stories)) == len(flagged)
    assert all(a["score"] is None or math.isfinite(a["score"]) for a in got.alerts)


def _assert_flags_follow_the_rule(
    got: WindowComputation, config: DetectorConfig, warm: bool
) -> None:
    scores, novel = got.documents.novelty_score, got.documents.novel
    assert np.isfinite(scores).all()
    if novel.any() and not novel.all():  # every flagged document outranks every other
        assert scores[novel].min() > scores[~novel].max()
    if warm and config.novel_mode == "threshold":
        assert np.array_equal(novel, scores > config.novel_threshold)
    elif warm:  # at least the top q of the documents with a term (a score above 0 has one)
        q_n = Fraction(repr(config.novel_top_q)) * int((scores > 0).sum())
        if q_n >= 1:
            assert novel.sum() >= math.ceil(q_n)


def _assert_shapes_agree(
    models: StreamModels, got: WindowComputation, config: DetectorConfig, n_docs: int
) -> None:
    m = models.detector.features.n_features_
    assert m <= config.max_vocabulary
    assert models.detector.model.components_.shape[0] == m
    assert models.detector.model.components_.shape[1] <= config.max_atoms
    for model in (models.topics, models.emerging):
        if model is not None and hasattr(model, "components_"):
            assert model.components_.shape[1] == m
    for row in got.topics:
        assert math.isfinite(row["strength"])
        assert all(math.isfinite(w) for _, w in row["terms"])
    if got.messages is not None:
        assert len(got.messages) == n_docs
    if got.snapshot is not None:
        arrays = got.snapshot["arrays"]
        assert arrays["dictionary_shape"][0] == arrays["terms"].size == m
