"""The transport-free per-window detector core: one row per document, state that round-trips."""

from __future__ import annotations

import io
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.consumers import detector_core
from sparsewatch.consumers.detector_core import (
    _repeats_an_alert,
    build_models,
    process_window,
    reseed_topics,
    score_late,
)
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.windowing import Buffered, ClosedWindow
from sparsewatch.models.nmf_online import MORNMF
from sparsewatch.replay.synthetic import generate_stream

from sparsewatch.config import load_config


def _windows(docs: list[dict], size: int) -> list[ClosedWindow]:
    items = [Buffered(Document(d["id"], d["text"], i, "s"), 0, i) for i, d in enumerate(docs)]
    return [
        ClosedWindow("s", k, k * size, (k + 1) * size, items[k * size : (k + 1) * size], "count")
        for k in range(len(items) // size)
    ]


def _config():
    return load_config(
        env={
            "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "150",
            "SPARSEWATCH_DETECTOR_SNAPSHOT_EVERY": "2",
        }
    )


def test_every_document_gets_one_row_even_when_it_ends_with_a_url():
    docs = generate_stream(900, kind="tweet", seed=3)
    docs[200]["text"] = "breaking story http://example.com/x"
    config = _config()
    models = build_models(config.detector)
    for w in _windows(docs, 150):
        comp = process_window(models, w, config.detector)
        assert [r["doc_id"] for r in comp.documents.rows()] == [b.doc.id for b in w.items]
        assert comp.messages is None or len(comp.messages) == len(w.items)
        flagged = {r["doc_id"] for r in comp.documents.rows() if r["novel"]}
        novel = [a for a in comp.alerts if a["kind"] == "novel_document"]
        alerted = {d for a in novel for d in (a["subject_id"], *a["related_ids"])}
        assert flagged == alerted  # one alert per story, each flagged document in one story
    assert models.detector.fitted and models.windows_done == 6


def test_checkpoint_round_trip_continues_bit_identically():
    docs = generate_stream(1050, kind="mixed", seed=4)
    config = _config()
    windows = _windows(docs, 150)
    a = build_models(config.detector)
    for w in windows[:4]:
        process_window(a, w, config.detector)
    buf = io.BytesIO()
    np.savez(buf, **a.get_state())
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        b = build_models(config.detector).set_state({k: z[k] for k in z.files})
    for w in windows[4:]:
        ra = process_window(a, w, config.detector)
        rb = process_window(b, w, config.detector)
        assert [r["novelty_score"] for r in ra.documents.rows()] == [
            r["novelty_score"] for r in rb.documents.rows()
        ]
        assert ra.topics == rb.topics
    late, _ = score_late(b, "s", windows[0].items[:5], size_ms=None)
    assert all(r["late"] and r["novelty_score"] is not None for r in late.rows())


def test_dynamic_nmf_topics_stay_within_the_configured_cap():
    """Emerging topics every window: the topic set grows until ``detector.max_topics``, then
    stays there (the per-window topic work stops growing with the stream)."""
    docs = generate_stream(2400, kind="tweet", seed=5)
    config = load_config(
        env={
            "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "100",
            "SPARSEWATCH_DETECTOR_N_TOPICS": "4",
            "SPARSEWATCH_DETECTOR_MAX_TOPICS": "9",
        }
    )
    models = build_models(config.detector)
    assert models.emerging is not None and models.emerging.max_topics == 9
    sizes = []
    for w in _windows(docs, 100):
        process_window(models, w, config.detector)
        sizes.append(models.emerging.topic_ids_.size)
    assert max(sizes) == 9 and sizes[-1] == 9
    assert sizes.index(9) < len(sizes) - 5  # reached well before the end, and held


def test_windows_without_any_term_process_cleanly_before_and_after_the_warmup():
    """Texts with no token at all (numbers, punctuation, empty): during the warm-up they give an
    empty vocabulary, which used to fit the detector with 0 terms and crash MOR-NMF on every
    retry of that window (0.01 / m); after it, their documents score 0 and are neither novel,
    nor dominated by a topic, nor counted in an emerging topic."""
    config = _config()
    blank = [
        {"id": f"b{i}", "text": ["", "123 456", "!!! ???", "42 42", "#1 @2"][i % 5]}
        for i in range(600)
    ]
    docs = blank[:300] + generate_stream(450, kind="tweet", seed=6) + blank[300:]
    windows = _windows(docs, 150)
    models = build_models(config.detector)
    for w in windows[:2]:
        comp = process_window(models, w, config.detector)
        assert not models.detector.fitted and comp.alerts == [] and comp.topics == []
        assert [r["novelty_score"] for r in comp.documents.rows()] == [None] * 150
    buf = io.BytesIO()
    np.savez(buf, **models.get_state())
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        models = build_models(config.detector).set_state({k: z[k] for k in z.files})
    for w in windows[2:5]:
        comp = process_window(models, w, config.detector)
        assert models.detector.fitted and comp.topics
    for w in windows[5:]:
        comp = process_window(models, w, config.detector)
        assert [r["novelty_score"] for r in comp.documents.rows()] == [0.0] * 150
        assert not any(r["novel"] or r["dominant_topic"] is not None for r in comp.documents.rows())
        assert comp.alerts == [] and len(comp.messages) == 150


def test_the_documents_of_each_announced_emerging_topic_are_marked_with_it():
    """An emerging_topic alert said "N docs" and the store had no way to list them: documents
    carried only their MOR-NMF topic."""
    docs = generate_stream(3000, kind="tweet", seed=21)
    docs.sort(key=lambda d: d["timestamp"])
    config = _config()
    models = build_models(config.detector)
    announced = 0
    for w in _windows(docs, 300):
        comp = process_window(models, w, config.detector)
        marked: dict[int, int] = {}
        for row in comp.documents.rows():
            if row["emerging_topic"] is not None:
                marked[row["emerging_topic"]] = marked.get(row["emerging_topic"], 0) + 1
        alerts = {
            int(a["subject_id"].removeprefix("topic-")): a["n_documents"]
            for a in comp.alerts
            if a["kind"] == "emerging_topic"
        }
        for a in comp.alerts:  # the raw volumes behind the rise are in the summary
            if a["kind"] == "emerging_topic":
                volume = [float(v) for v in a["summary"].split("volume ")[1].split(")")[0].split()]
                assert min(volume) >= 0.0
                rise, rounding = volume[-1] - volume[-2], 5e-3 * (volume[-1] + volume[-2])
                assert abs(rise - a["score"]) <= rounding + 1e-9
        assert marked == alerts  # every announced topic, with its count, and nothing else
        # an alert's event time is its newest document's: inside the window (it was the
        # window's end, which `alerts --by event` counted in the next window's range)
        times = {row["doc_id"]: row["event_time"] for row in comp.documents.rows()}
        for a in comp.alerts:
            if a["kind"] == "emerging_topic":
                topic_id = int(a["subject_id"].removeprefix("topic-"))
                newest = max(
                    times[r["doc_id"]]
                    for r in comp.documents.rows()
                    if r["emerging_topic"] == topic_id
                )
                assert a["event_time"] == newest
                assert comp.window["start"] <= a["event_time"] < comp.window["end"]
        emerging_rows = {r["topic_id"] for r in comp.topics if r["emerging"]}
        assert set(marked) == emerging_rows
        # strength on one scale for both kinds: the topic's share of the window (an emerging
        # topic's was a weighted document volume, 7.3 beside MOR-NMF shares of 0.17)
        for r in comp.topics:
            assert 0 <= r["strength"] <= 1
            if r["emerging"]:
                assert r["strength"] == marked[r["topic_id"]] / len(w.items)
        assert all(t >= config.detector.n_topics for t in marked)
        announced += len(alerts)
    assert announced >= 3


def test_a_snapshots_sizes_are_those_of_its_arrays():
    """The snapshot's n_atoms was the dictionary's size when the window was scored, before the
    window's new atoms: every stored snapshot of a growing dictionary under-counted them."""
    docs = generate_stream(1050, kind="mixed", seed=5)
    config = _config()
    models = build_models(config.detector)
    snapshots = []
    for w in _windows(docs, 150):
        comp = process_window(models, w, config.detector)
        if comp.snapshot is not None:
            snapshots.append(comp.snapshot)
    grown = {s["meta"]["n_atoms"] for s in snapshots}
    assert len(snapshots) >= 2 and len(grown) >= 2  # the dictionary grew between snapshots
    for snapshot in snapshots:
        arrays, meta = snapshot["arrays"], snapshot["meta"]
        assert [meta["n_terms"], meta["n_atoms"]] == list(arrays["dictionary_shape"])
        assert meta["n_terms"] == len(arrays["terms"])


def _restored(state: dict | None, env: dict[str, str]):
    config = load_config(env={"SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "150", **env})
    models = build_models(config.detector)
    return config, models if state is None else models.set_state(state)


def _emerging_ids(comps) -> set[int]:
    return {r["topic_id"] for c in comps for r in c.topics if r["emerging"]}


@pytest.mark.parametrize("n_topics", [5, 20])
def test_changed_topic_settings_restart_the_topic_models_and_never_reuse_an_id(caplog, n_topics):
    """A checkpoint taken with 10 topics restored under ``n_topics = 5``: MOR-NMF kept its 10
    topics silently, and the emerging topics' ids (``n_topics + i``) moved down, so one id named
    two topics of the stream; turning the emerging topics off and on again reused ids too.
    Restarted MOR-NMF topics took ``0 .. n_topics - 1`` again: raised to 20, ids the emerging
    topics had been announced under (``documents --topic topic-N`` then listed both)."""
    docs = generate_stream(3000, kind="tweet", seed=21)
    docs.sort(key=lambda d: d["timestamp"])
    windows = _windows(docs, 300)
    config, models = _restored(None, {})
    first = [process_window(models, w, config.detector) for w in windows[:4]]
    used = _emerging_ids(first) | set(range(config.detector.n_topics))
    assert _emerging_ids(first) and models.next_topic_id > max(used)

    env = {"SPARSEWATCH_DETECTOR_N_TOPICS": str(n_topics)}
    with caplog.at_level("WARNING", logger="sparsewatch.consumers.detector_core"):
        config5, fewer = _restored(models.get_state(), env)
    assert f"have 10 topics, the configuration {n_topics}: they start afresh" in caplog.text
    later = [process_window(fewer, w, config5.detector) for w in windows[4:]]
    assert fewer.topics.components_.shape[0] == n_topics
    topic_ids = {r["topic_id"] for c in later for r in c.topics if not r["emerging"]}
    assert len(topic_ids) == n_topics and not topic_ids & used
    tagged = {int(t) for c in later for t in c.documents.dominant_topic if t >= 0}
    assert tagged and tagged <= topic_ids
    assert _emerging_ids(later) and not _emerging_ids(later) & (used | topic_ids)
    assert fewer.detector.fitted and fewer.windows_done == len(windows)
    used |= topic_ids

    # emerging topics off for a while, then on again: new ids again
    _, off = _restored(fewer.get_state(), {**env, "SPARSEWATCH_DETECTOR_EMERGING_TOPICS": "false"})
    assert off.emerging is None
    used |= _emerging_ids(later)
    config_on, on = _restored(off.get_state(), env)
    again = [process_window(on, w, config_on.detector) for w in windows[:6]]
    assert _emerging_ids(again) and not _emerging_ids(again) & used


def test_an_unchanged_configuration_keeps_the_emerging_ids_across_a_restore():
    docs = generate_stream(3000, kind="tweet", seed=21)
    docs.sort(key=lambda d: d["timestamp"])
    windows = _windows(docs, 300)
    config, a = _restored(None, {})
    for w in windows[:4]:
        process_window(a, w, config.detector)
    _, b = _restored(a.get_state(), {})
    ids = ("topics_id_base", "emerging_id_base", "next_topic_id")
    assert [getattr(b, k) for k in ids] == [getattr(a, k) for k in ids]
    assert a.announced and b.announced == a.announced  # the recent alerts' terms too
    for w in windows[4:]:
        assert (
            process_window(a, w, config.detector).topics
            == process_window(b, w, config.detector).topics
        )


def test_repeats_of_a_recent_emerging_topic_alert_are_recognised():
    announced: dict = {}
    story = {"quake": 0.7, "tokyo": 0.3}
    assert _repeats_an_alert(announced, story, seq=10, windows=3) is None
    announced[40] = (10, story)
    again = {"quake": 0.6, "tokyo": 0.2, "aftershock": 0.2}  # cosine 0.93
    assert _repeats_an_alert(announced, again, seq=13, windows=3) == 40
    assert _repeats_an_alert(announced, {"election": 1.0}, seq=13, windows=3) is None
    assert _repeats_an_alert(announced, again, seq=14, windows=3) is None  # forgotten
    assert announced == {}
    announced[41] = (14, story)
    assert _repeats_an_alert(announced, again, seq=14, windows=0) is None  # 0: never a repeat


def _emerging_alerts(comps) -> list[tuple[int, dict, dict[str, float]]]:
    """(window, alert, its topic's terms) of every emerging-topic alert."""
    out = []
    for k, comp in enumerate(comps):
        rows = {r["topic_id"]: dict(r["terms"]) for r in comp.topics}
        for a in comp.alerts:
            if a["kind"] == "emerging_topic":
                out.append((k, a, rows[int(a["subject_id"].removeprefix("topic-"))]))
    return out


def test_an_emerging_topic_repeating_a_recent_alert_is_not_alerted_again():
    """The dynamic NMF drops a topic under its cap while the story goes on, and the story then
    emerges again under a new id: a second alert for the same story, a window or two later."""
    docs = generate_stream(6000, kind="tweet", seed=21)
    docs.sort(key=lambda d: d["timestamp"])
    windows = _windows(docs, 500)
    runs = {}
    for repeat_windows in ("3", "0"):
        config, models = _restored(
            None, {"SPARSEWATCH_DETECTOR_EMERGING_REPEAT_WINDOWS": repeat_windows}
        )
        runs[repeat_windows] = [process_window(models, w, config.detector) for w in windows]
    kept, every = _emerging_alerts(runs["3"]), _emerging_alerts(runs["0"])
    kept_ids = [(k, a["subject_id"]) for k, a, _ in kept]
    every_ids = [(k, a["subject_id"]) for k, a, _ in every]
    assert kept_ids == [i for i in every_ids if i in kept_ids]  # a subsequence of them all
    dropped = [(k, a, terms) for k, a, terms in every if (k, a["subject_id"]) not in kept_ids]
    assert dropped
    for k, alert, terms in dropped:
        # its topic row and its documents are still stored under its id ...
        topic_id = int(alert["subject_id"].removeprefix("topic-"))
        assert any(r["emerging_topic"] == topic_id for r in runs["3"][k].documents.rows())
        # ... and it repeats an alert raised in its window or the three before
        earlier = [t for j, _, t in kept if k - 3 <= j <= k and t is not terms]
        assert any(
            _repeats_an_alert({0: (k, other)}, terms, seq=k, windows=3) == 0 for other in earlier
        )
    # the novelty side is untouched
    assert [r["novelty_score"] for c in runs["3"] for r in c.documents.rows()] == [
        r["novelty_score"] for c in runs["0"] for r in c.documents.rows()
    ]


def _story_docs(rng, terms: list[int], n: int, m: int = 30) -> np.ndarray:
    X = np.zeros((n, m))
    for row in X:
        row[rng.choice(terms, size=3, replace=False)] = rng.uniform(0.5, 1.0, 3)
        row[rng.integers(25, m)] = 0.1  # a background word
    return X


def test_a_topic_no_document_uses_is_reseeded_from_the_story_left_unexplained():
    """MOR-NMF kept the warm-up's topics: a story born later was never a topic of its own."""
    rng = np.random.default_rng(0)
    stories = {"a": [0, 1, 2, 3, 4], "b": [5, 6, 7, 8, 9], "c": [10, 11, 12, 13, 14]}
    warm = np.vstack([_story_docs(rng, t, 40) for t in stories.values()])
    model = MORNMF(n_components=3, batch_size=30, max_epochs=20, random_state=0).fit(warm)
    later = np.vstack(  # story c is over, story d is new
        [
            _story_docs(rng, stories["a"], 40),
            _story_docs(rng, stories["b"], 40),
            _story_docs(rng, [20, 21, 22, 23, 24], 12),
        ]
    )
    X = sp.csr_matrix(later)
    model.partial_fit(X)
    H = model.transform(X)
    old_c = int(np.argmax(model.components_[:, 10:15].sum(axis=1)))
    assert reseed_topics(model, X, H, max_new=0) == []
    assert reseed_topics(model, X, H, max_new=1) == [old_c]
    assert model.components_[old_c, 20:25].sum() > 0.9  # the new story's words
    dominant = model.transform(X).argmax(axis=1)
    assert (dominant[-12:] == old_c).all() and not (dominant[:80] == old_c).any()
    # nothing left to explain: nothing re-seeded
    H = model.transform(X)
    assert reseed_topics(model, X, H, max_new=1) == []


def _later_window(rng, stories: dict[str, list[int]], new_story: int, repeat: int) -> np.ndarray:
    """Stories a and b known, story d (terms 20-24) new with ``new_story`` documents; ``repeat``
    copies of the whole window (documents repeated: the same window, ``repeat`` times larger)."""
    window = np.vstack(
        [
            _story_docs(rng, stories["a"], 40),
            _story_docs(rng, stories["b"], 40),
            _story_docs(rng, [20, 21, 22, 23, 24], new_story),
        ]
    )
    return np.tile(window, (repeat, 1))


def _stale_model(rng, stories: dict[str, list[int]]) -> MORNMF:
    warm = np.vstack([_story_docs(rng, t, 40) for t in stories.values()])
    return MORNMF(n_components=3, batch_size=30, max_epochs=20, random_state=0).fit(warm)


@pytest.mark.parametrize("pool_max", [10, 2000])
def test_a_bounded_story_search_still_finds_the_new_story(monkeypatch, pool_max):
    """The worst-explained tenth of a window (here 120 documents, the new story's) is searched
    through at most RESEED_POOL_MAX of them, spread over its ranks: with 10 the new story is
    still found and its topic is still made of the story's words."""
    monkeypatch.setattr(detector_core, "RESEED_POOL_MAX", pool_max)
    rng = np.random.default_rng(1)
    stories = {"a": [0, 1, 2, 3, 4], "b": [5, 6, 7, 8, 9], "c": [10, 11, 12, 13, 14]}
    model = _stale_model(rng, stories)
    X = sp.csr_matrix(_later_window(rng, stories, new_story=12, repeat=10))  # 920 documents
    model.partial_fit(X)
    H = model.transform(X)
    old_c = int(np.argmax(model.components_[:, 10:15].sum(axis=1)))
    assert reseed_topics(model, X, H, max_new=1) == [old_c]
    assert model.components_[old_c, 20:25].sum() > 0.9


def test_the_story_search_of_a_big_window_needs_memory_linear_in_its_size():
    """A window of 92,000 documents: its worst-explained tenth has 9,200, whose pairwise
    comparison alone takes 85 MB as booleans (680 MB in float64, as it was computed before the
    bound); bounded at RESEED_POOL_MAX, the whole search peaks far below that."""
    rng = np.random.default_rng(2)
    stories = {"a": [0, 1, 2, 3, 4], "b": [5, 6, 7, 8, 9], "c": [10, 11, 12, 13, 14]}
    model = _stale_model(rng, stories)
    X = sp.csr_matrix(_later_window(rng, stories, new_story=12, repeat=1000))
    H = model.transform(X)
    old_c = int(np.argmax(model.components_[:, 10:15].sum(axis=1)))
    tracemalloc.start()
    try:
        replaced = reseed_topics(model, X, H, max_new=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert replaced == [old_c]
    assert peak < 60e6


def test_two_identical_topics_used_alike_lose_only_one_to_a_reseed():
    """Two topics with the same terms and exactly the same usage were each taken for the other's
    duplicate: with two re-seeds a window and two new stories, both were replaced and the story
    they shared lost its topic. The one of higher index is the duplicate now."""
    rng = np.random.default_rng(2)
    stories = {"a": [0, 1, 2, 3, 4], "b": [5, 6, 7, 8, 9], "c": [10, 11, 12, 13, 14]}
    model = _stale_model(rng, stories)
    story = np.zeros((2, 30))
    story[0, 0:5] = story[1, 5:10] = 0.2
    a, c = 0, 2
    model.replace_components([0, 1, 2], story[[0, 1, 0]])  # topic 2 repeats topic 0
    X = sp.csr_matrix(
        np.vstack(
            [
                _story_docs(rng, stories["a"], 40),
                _story_docs(rng, stories["b"], 40),
                _story_docs(rng, [15, 16, 17, 18, 19], 12),  # two new stories
                _story_docs(rng, [20, 21, 22, 23, 24], 12),
            ]
        )
    )
    H = model.transform(X)
    H[:, [a, c]] = H[:, [a, c]].mean(axis=1, keepdims=True)  # exactly the same usage
    assert reseed_topics(model, X, H, max_new=2) == [max(a, c)]
    assert model.components_[min(a, c), 0:5].sum() > 0.9  # story a keeps its topic


def test_a_window_smaller_than_the_topic_rank_still_updates_fitted_topic_models():
    """Once fitted, the topic models take every window: one of fewer documents than
    ``detector.n_topics`` is a time point of the dynamic NMF and its documents get their MOR-NMF
    topics (it was skipped: a quiet window vanished from the time axis, its topics were -1)."""
    docs = generate_stream(800, kind="tweet", seed=3)
    config = _config()
    models = build_models(config.detector)
    windows = _windows(docs, 150)
    for w in windows[:4]:
        process_window(models, w, config.detector)
    assert models.topics is not None and models.emerging is not None
    topic_steps, time_points = models.topics.n_steps_, models.emerging.n_steps_
    small = config.detector.n_topics - 1
    items = windows[4].items[:small]
    window = ClosedWindow("s", 4, 4 * 150, 5 * 150, items, "count")
    comp = process_window(models, window, config.detector)
    assert models.topics.n_steps_ > topic_steps
    assert models.emerging.n_steps_ == time_points + 1
    assert (comp.documents.dominant_topic >= 0).any()
    assert len([t for t in comp.topics if not t["emerging"]]) == config.detector.n_topics


def test_a_window_smaller_than_the_topic_rank_does_not_start_the_topic_models():
    docs = generate_stream(300, kind="tweet", seed=3)
    config = load_config(env={"SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "5"})
    models = build_models(config.detector)
    small = _windows(docs, config.detector.n_topics - 1)[0]
    comp = process_window(models, small, config.detector)
    assert models.detector.fitted  # scored, with features the topic models could take
    assert not hasattr(models.topics, "components_") and not hasattr(models.emerging, "components_")
    assert (comp.documents.dominant_topic == -1).all() and comp.topics == []


def _by_document(comp: detector_core.WindowComputation) -> tuple[dict[str, tuple], list]:
    """A window's rows by document id (NaN scores as None: NaN != NaN) and its score messages
    (keyed by stream: each value carries its document's id), in any order."""

    def value(x: object) -> object:
        return None if isinstance(x, float) and np.isnan(x) else x

    rows = {r["doc_id"]: tuple(value(v) for v in r.values()) for r in comp.documents.rows()}
    messages = list(comp.messages or [])
    assert {key for key, _ in messages} <= {"s"}
    return rows, sorted(message for _, message in messages)


def _alerts(comp: detector_core.WindowComputation) -> list[str]:
    return sorted(repr(sorted(a.items())) for a in comp.alerts)


def test_a_windows_results_do_not_depend_on_the_order_its_documents_arrived_in():
    """The novelty warm-up starts from documents it picks by position, new atoms' documents go to
    the earlier row on ties, and the topic models' first fit depends on the row order: before,
    a window's documents read in another order were flagged and given topics otherwise, in that
    window and the two next (max score difference 0.88 and 0.27, 14 and 2 flags, ~280 dominant
    topics, alerts). Event times tie by threes: the id decides among them."""
    config = load_config(
        env={
            "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "200",
            "SPARSEWATCH_DETECTOR_INITIAL_ATOMS": "20",
        }
    ).detector
    docs = generate_stream(n_docs=900, seed=0)
    rng = np.random.default_rng(1)

    def window(k: int, order: np.ndarray | None) -> ClosedWindow:
        part = docs[k * 300 : (k + 1) * 300]
        items = [
            Buffered(Document(d["id"], d["text"], 1000 * k + i // 3, "s"), 0, 1000 * k + i)
            for i, d in enumerate(part)
        ]
        if order is not None:
            items = [items[j] for j in order]
        return ClosedWindow("s", k, 1000 * k, 1000 * k + 1000, items, "count")

    runs = []
    for orders in ([None] * 3, [rng.permutation(300), rng.permutation(300), None]):
        models = build_models(config)
        runs.append([process_window(models, window(k, orders[k]), config) for k in range(3)])
    for k, (first, second) in enumerate(zip(*runs, strict=True)):
        assert first.window == {**second.window, "timings": first.window["timings"]}, k
        assert _by_document(first) == _by_document(second), k
        assert _alerts(first) == _alerts(second), k
        assert first.topics == second.topics, k
    assert any(a["kind"] == "emerging_topic" for comp in runs[0] for a in comp.alerts)
    assert runs[0][2].documents.novel.any() and (runs[0][2].documents.dominant_topic >= 0).all()


def test_a_window_sees_its_documents_by_event_time_then_id():
    items = [
        Buffered(Document(doc_id, "storm report", ts, "s"), 0, offset)
        for offset, (doc_id, ts) in enumerate([("b", 5), ("c", 2), ("a", 5), ("a2", 2), ("d", 1)])
    ]
    window = ClosedWindow("s", 0, 0, 10, items, "count")
    comp = process_window(build_models(_config().detector), window, _config().detector)
    assert comp.documents.doc_id == ["d", "a2", "c", "a", "b"]
    assert [b.doc.id for b in window.items] == ["b", "c", "a", "a2", "d"]  # the caller's as it was
