"""Restoring a stream's models from a checkpoint taken before its topic models had learned."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sparsewatch.consumers.detector_core import build_models, process_window
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.consumers.windowing import Buffered, ClosedWindow
from sparsewatch.replay.synthetic import generate_stream

from sparsewatch.config import Config


def test_topic_models_without_state_in_the_checkpoint_start_afresh() -> None:
    """A topic model already fitted stayed as it was when the checkpoint had no state for it, so
    the restored stream went on with topics the checkpoint never had."""
    config = Config().detector
    checkpoint = build_models(config).get_state()  # taken before any topic was learned
    assert not any(k.startswith(("topics.", "emerging.")) for k in checkpoint)
    models = build_models(config)
    X = np.random.default_rng(0).random((40, 30))
    models.topics.partial_fit(X)
    models.emerging.partial_fit(X, vocabulary=[f"t{i}" for i in range(30)])
    models.windows_done = 5
    models.set_state(checkpoint)
    assert not hasattr(models.topics, "components_")
    assert not hasattr(models.emerging, "components_")
    assert models.windows_done == 0
    assert models.get_state().keys() == checkpoint.keys()
    fresh = build_models(config)
    assert models.topics.get_params() == fresh.topics.get_params()
    assert models.emerging.get_params() == fresh.emerging.get_params()


def _window(seq: int, docs: list[dict]) -> ClosedWindow:
    items = [
        Buffered(Document(d["id"], d["text"], parse_timestamp_ms(d["timestamp"])), 0, i)
        for i, d in enumerate(docs)
    ]
    times = [b.doc.timestamp_ms for b in items]
    return ClosedWindow("default", seq, min(times), max(times) + 1, items, "count")


@pytest.mark.parametrize("new_atoms_per_window", [1000, 0])
def test_a_lowered_atom_cap_holds_for_a_restored_stream(new_atoms_per_window: int) -> None:
    """``detector.max_atoms`` lowered before a restart (with growth on or off): the restored
    dictionary kept all its atoms; after the next window it is within the new cap, as the
    vocabulary is within a lowered ``max_vocabulary``."""
    docs = generate_stream(n_docs=2400, seed=0)
    config = dataclasses.replace(Config().detector, initial_atoms=100, max_step_documents=0)
    models = build_models(config)
    for i in range(3):
        process_window(models, _window(i, docs[i * 600 : (i + 1) * 600]), config)
    assert models.detector.model.components_.shape[1] > 60
    lowered = dataclasses.replace(
        config, max_atoms=60, max_vocabulary=500, new_atoms_per_window=new_atoms_per_window
    )
    restored = build_models(lowered).set_state(models.get_state())
    result = process_window(restored, _window(3, docs[1800:]), lowered)
    assert len(result.documents) == 600
    model = restored.detector.model
    assert model.components_.shape == (500, 60)
    assert model.atom_last_used_.shape == (60,)
    assert restored.detector.get_state()["model.atom_last_used"].shape == (60,)


def test_no_topic_warning_for_a_checkpoint_without_topic_models(caplog) -> None:
    """``n_topics`` changed, but the checkpoint had no topic model (topics off, or taken before
    any was fitted): nothing starts afresh, and the warning said otherwise."""
    config = Config().detector
    checkpoint = build_models(dataclasses.replace(config, n_topics=7)).get_state()
    with caplog.at_level("WARNING"):
        build_models(config).set_state(checkpoint)
    assert "start afresh" not in caplog.text
