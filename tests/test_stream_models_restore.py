"""Restoring a stream's models from a checkpoint taken before its topic models had learned."""

from __future__ import annotations

import numpy as np
from sparsewatch.consumers.detector_core import build_models

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
