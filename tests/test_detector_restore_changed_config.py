"""A stream checkpointed under one detector or windows configuration and restored under another:
the new settings hold from the restore on (operators edit the TOML and restart the detector)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import numpy as np
import pytest
from sparsewatch.consumers.detector_core import build_models, process_window, score_late
from sparsewatch.consumers.detector_worker import DetectorStreamState
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.consumers.windowing import Buffered, ClosedWindow, StreamWindower, WindowSpec
from sparsewatch.models.text_features import StreamingTfidf
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.serialization import arrays_to_npz, npz_to_arrays
from sparsewatch.storage.store import Checkpoint

from sparsewatch.config import Config, DetectorConfig

WINDOW = 300


def _items(docs: list[dict], first_offset: int) -> list[Buffered]:
    return [
        Buffered(
            Document(d["id"], d["text"], parse_timestamp_ms(d["timestamp"])), 0, first_offset + i
        )
        for i, d in enumerate(docs)
    ]


def _window(seq: int, docs: list[dict]) -> ClosedWindow:
    items = _items(docs, seq * WINDOW)
    times = [b.doc.timestamp_ms for b in items]
    return ClosedWindow("default", seq, min(times), max(times) + 1, items, "count")


def _small_config(**changes: object) -> DetectorConfig:
    base = dataclasses.replace(
        Config().detector,
        initial_atoms=40,
        max_atoms=120,
        new_atoms_per_window=30,
        max_step_documents=0,
        n_topics=5,
        max_topics=12,
    )
    return dataclasses.replace(base, **changes)


def _checkpointed(config: DetectorConfig, docs: list[dict], n_windows: int) -> dict:
    """The stream's models after ``n_windows`` windows, as a stored checkpoint reads back."""
    models = build_models(config)
    for seq in range(n_windows):
        process_window(models, _window(seq, docs[seq * WINDOW : (seq + 1) * WINDOW]), config)
    return npz_to_arrays(arrays_to_npz(models.get_state()))


@pytest.mark.parametrize("saved_mode", ["top_q", "threshold"])
def test_late_documents_after_a_restore_are_flagged_by_the_configured_threshold(
    saved_mode: str,
) -> None:
    """Restored into ``threshold`` mode (switched from ``top_q``, or with ``novel_threshold``
    raised), late documents were flagged by the checkpoint's cut until the stream's next window
    closed (a day, with daily windows): the alerts the operator had just raised the threshold
    against kept coming."""
    docs = generate_stream(n_docs=1300, seed=0)
    saved = _small_config(novel_mode=saved_mode, novel_threshold=0.95)
    state = _checkpointed(saved, docs, 3)
    zeta = 1.05
    restored = build_models(_small_config(novel_mode="threshold", novel_threshold=zeta))
    restored.set_state(state)
    old_cut = float(state["detector.model.threshold"])
    assert old_cut < zeta
    rows, _ = score_late(restored, "default", _items(docs[900:1300], 900), None)
    scores = rows.novelty_score
    assert ((scores > old_cut) & (scores <= zeta)).any()  # documents the old cut flagged
    assert np.array_equal(rows.novel, scores > zeta)


def test_a_lowered_max_token_chars_evicts_the_longer_terms_of_a_restored_vocabulary() -> None:
    """``detector.max_token_chars`` lowered before a restart: the restored vocabulary kept its
    longer terms (the tokenizer never yields them again) and with them the width of every
    entry of the stored vocabulary, unless the vocabulary cap happened to evict them. After the
    next window every term is within the new cap, and every model's term dimension follows."""
    docs = generate_stream(n_docs=1200, seed=0)
    long_words = [
        {**d, "text": d["text"] + f" supercalifragilistic{i % 7} #hashtagtoolong{i % 5}"}
        for i, d in enumerate(docs[:900])
    ]
    saved = _small_config()
    state = _checkpointed(saved, long_words, 3)
    assert max(len(t) for t in state["detector.features.terms"].tolist()) > 15
    lowered = _small_config(max_token_chars=8)
    models = build_models(lowered).set_state(state)
    result = process_window(models, _window(3, docs[900:]), lowered)
    assert len(result.documents) == WINDOW and result.messages is not None
    terms = models.detector.features.terms_
    assert max(len(t) for t in terms.tolist()) <= 8
    assert terms.dtype.itemsize <= 8 * 4  # the array is as narrow as its terms
    n_terms = terms.size
    assert models.detector.model.components_.shape[0] == n_terms
    assert models.topics.components_.shape[1] == n_terms
    assert models.emerging.components_.shape[1] == n_terms
    again = build_models(lowered).set_state(npz_to_arrays(arrays_to_npz(models.get_state())))
    assert len(process_window(again, _window(4, docs[900:1200]), lowered).documents) == WINDOW


def test_a_lowered_max_token_chars_keeps_terms_the_tokenizer_still_yields() -> None:
    """Only terms with a word, domain or tag body over the new cap are evicted: a bigram of two
    short words, ``url:`` before a short domain or ``#`` before a short tag are longer than
    the cap but still produced."""
    texts = [
        "quake hits coast https://bbc.com/news #alert @reporter",
        "extraordinarily long words https://averyverylongdomain.example.org",
    ]
    saved = StreamingTfidf(bigrams=True, hashtags="keep", max_token_chars=40).fit(texts)
    lowered = StreamingTfidf(bigrams=True, hashtags="keep", max_token_chars=8)
    lowered.set_state(saved.get_state())
    lowered.partial_fit(["quake tremor"])
    kept = set(lowered.terms_.tolist())
    assert {"quake hits", "url:bbc.com", "#alert", "@reporter", "hits coast"} <= kept
    assert not kept & {
        "extraordinarily",
        "extraordinarily long",
        "url:averyverylongdomain.example.org",
    }
    long_ones = {t for t in saved.terms_.tolist() if "extraordinarily" in t or "averyvery" in t}
    assert kept == (set(saved.terms_.tolist()) - long_ones) | {"tremor", "quake tremor"}
    assert set(saved.terms_[lowered.evicted_rows_].tolist()) == long_ones


def _windower_items(n: int) -> list[Buffered]:
    """``n`` documents of one stream on partition 0, a minute apart, offsets 0..n-1."""
    return [Buffered(Document(f"d{i}", f"story {i}", 60_000 * i), 0, i) for i in range(n)]


def test_count_windows_restored_into_time_windows_learn_no_message_twice() -> None:
    """``windows.count`` set to 0 before a restart: the messages a closed count window had
    consumed, read again (another stream of the partition held its resume offset back), were
    buffered into the new time windows and learnt a second time; those of the open count
    window, never learnt, must be."""
    items = _windower_items(300)
    counted = StreamWindower("s", WindowSpec(size_ms=None, count=100))
    closed = [w for b in items[:250] for w in counted.add(b, now=0.0)[0]]
    assert [len(w.items) for w in closed] == [100, 100]
    state = npz_to_arrays(arrays_to_npz(counted.get_state()))
    timed = StreamWindower("s", WindowSpec(size_ms=3_600_000)).set_state(state)
    added = [timed.add(b, now=1.0) for b in items[150:]]
    assert [status for _, status in added[:50]] == ["seen"] * 50  # 150..199: count window 1
    assert {status for _, status in added[50:]} == {"buffered"}  # 200..249: the open one
    windows = [w for closed, _ in added for w in closed] + timed.close_all("end_of_stream")
    assert [b.offset for w in windows for b in w.items] == list(range(200, 300))


def test_the_detector_stream_restored_into_time_windows_learns_each_document_once() -> None:
    """The same through the detector's stream state, restored from its checkpoint: the windows
    after the restore hold only the documents no window had learnt."""
    docs = generate_stream(n_docs=700, seed=0)
    config = Config()
    config.windows.count = 200
    config.detector = _small_config(warmup_documents=150)
    state = DetectorStreamState("default", config, None)
    items = _items(docs, 0)
    learnt = [
        o.n_documents
        for b in items[:500]
        for o in state.add(b.doc, 0, b.offset, 0.0)
        if o.is_window
    ]
    assert learnt == [200, 200]
    saved, meta = state.checkpoint()
    checkpoint = Checkpoint(
        "g", "default", npz_to_arrays(arrays_to_npz(saved)), meta, datetime.now(UTC)
    )
    config.windows.count = 0
    config.windows.size = "1d"
    restored = DetectorStreamState("default", config, checkpoint)
    outputs = [o for b in items[300:] for o in restored.add(b.doc, 0, b.offset, 1.0)]
    outputs += restored.close_idle(silent_until=1e9, wall_ms=1e15)
    assert sum(o.n_documents for o in outputs if o.is_window) == 300  # offsets 400..699
    assert restored.models.windows_done == 3
