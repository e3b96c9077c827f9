"""The per-window core: a checkpoint after EVERY window of a long stream with small
caps (vocabulary evictions every window, dictionary at its cap, windows of 0, 1 and 2
documents, mid-warm-up) continues bit-identically, and every model keeps one row per term."""

from __future__ import annotations

import io

import numpy as np
from sparsewatch.consumers.detector_core import StreamModels, build_models, process_window
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.windowing import Buffered, ClosedWindow
from sparsewatch.replay.synthetic import generate_stream

from sparsewatch.config import DetectorConfig, load_config


def _round_trip(models: StreamModels, config: DetectorConfig) -> StreamModels:
    buf = io.BytesIO()
    np.savez(buf, **models.get_state())
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        return build_models(config).set_state({k: z[k] for k in z.files})


def test_a_checkpoint_after_every_window_continues_bit_identically_with_small_caps() -> None:
    config = load_config(
        env={
            "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "120",
            "SPARSEWATCH_DETECTOR_SNAPSHOT_EVERY": "1",
            "SPARSEWATCH_DETECTOR_MAX_VOCABULARY": "300",
            "SPARSEWATCH_DETECTOR_N_TOPICS": "4",
            "SPARSEWATCH_DETECTOR_INITIAL_ATOMS": "30",
            "SPARSEWATCH_DETECTOR_MAX_ATOMS": "60",
            "SPARSEWATCH_DETECTOR_MAX_TOPICS": "8",
        }
    ).detector
    sizes = [50, 0, 1, 80, 2, 130, 100, 0, 1, 80, 130, 2, 100, 50, 130, 1, 100, 80, 0, 130]
    docs = generate_stream(sum(sizes), kind="mixed", seed=0)
    items = [Buffered(Document(d["id"], d["text"], i, "s"), 0, i) for i, d in enumerate(docs)]
    a, b = build_models(config), build_models(config)
    at = 0
    for seq, size in enumerate(sizes):
        window = ClosedWindow("s", seq, at, at + size + 1, items[at : at + size], "count")
        at += size
        ra = process_window(a, window, config)
        b = _round_trip(b, config)
        rb = process_window(b, window, config)
        assert ra.documents.rows() == rb.documents.rows()
        assert ra.topics == rb.topics and ra.alerts == rb.alerts
        assert (ra.snapshot is None) == (rb.snapshot is None)
        if ra.snapshot is not None:
            for name, array in ra.snapshot["arrays"].items():
                assert np.array_equal(array, rb.snapshot["arrays"][name]), name
            arrays = ra.snapshot["arrays"]
            assert arrays["dictionary_shape"][0] == arrays["terms"].size
        if a.detector.fitted:
            m = a.detector.features.n_features_
            assert m <= 300 and a.detector.model.components_.shape[0] == m
            for model in (a.topics, a.emerging):
                if model is not None and hasattr(model, "components_"):
                    assert model.components_.shape[1] == m
    assert a.detector.fitted and a.detector.features.n_features_ == 300
