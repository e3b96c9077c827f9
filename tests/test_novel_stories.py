"""One alert per story: the novel documents of a window that are alike (a retweet storm, one
wire story in many outlets) raise one ``novel_document`` alert, led by the most novel of them,
counting them and listing the others (models.stories, detector.novel_similarity)."""

from __future__ import annotations

import json
import tracemalloc
from datetime import UTC, datetime

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from sparsewatch.consumers.detector_core import (
    RELATED_IDS,
    build_models,
    novel_alerts,
    process_window,
    score_late,
)
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.windowing import Buffered, ClosedWindow
from sparsewatch.models.stories import similar_groups
from sparsewatch.storage.alert_follower import AlertFollower
from sparsewatch.storage.document_columns import DocumentColumns
from sparsewatch.storage.store import Store

from sparsewatch.config import DetectorConfig, load_config
from sparsewatch.errors import SparsewatchError
from tests.support.cli import limit_note, run_cli


def _components_by_union_find(X: np.ndarray, threshold: float) -> list[int]:
    """Group labels by first appearance: every pair of columns compared (cosine, dense)."""
    norms = np.linalg.norm(X, axis=0)
    U = X / np.where(norms > 0, norms, 1)
    C = U.T @ U
    n = X.shape[1]
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(n):
        for j in range(n):
            if C[i, j] >= threshold - 1e-9:
                parent[find(i)] = find(j)
    labels: dict[int, int] = {}
    return [labels.setdefault(find(i), len(labels)) for i in range(n)]


@pytest.mark.parametrize("seed", range(30))
def test_similar_groups_are_the_components_of_the_pairwise_cosines(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 70))
    X = sp.random(25, n, density=0.12, random_state=seed, format="csc")
    threshold = float(rng.uniform(0.05, 1.0))
    got = similar_groups(X, threshold, block=int(rng.integers(1, 16)))
    assert got.tolist() == _components_by_union_find(X.toarray(), threshold)


def test_exact_copies_group_at_similarity_one_and_empty_documents_stay_alone():
    base = np.array([[0.5], [0.25], [0.25], [0.0]])
    X = np.hstack([base, 3 * base, np.zeros((4, 1)), np.zeros((4, 1)), [[0], [0], [0.5], [0.5]]])
    assert similar_groups(X, 1.0).tolist() == [0, 0, 1, 2, 3]
    with pytest.raises(ValueError, match="min_similarity"):
        similar_groups(X, 0.0)
    with pytest.raises(ValueError, match="min_similarity"):
        similar_groups(X, 1.5)


def _similar_groups_keeping_every_pair(X: sp.spmatrix, min_similarity: float, block: int):
    """The implementation before the components were merged block by block (every similar pair
    kept until the end): the reference its labels must equal."""
    F = sp.csc_matrix(X, dtype=np.float64)
    n = F.shape[1]
    norms = np.sqrt(np.asarray(F.multiply(F).sum(axis=0)).ravel())
    F = F @ sp.diags(np.divide(1.0, norms, out=np.zeros(n), where=norms > 0))
    FT = F.T.tocsr()
    edges = []
    for start in range(0, n, block):
        S = sp.coo_matrix(FT[start : start + block] @ F)
        keep = S.data >= min_similarity - 1e-9
        edges.append((S.row[keep] + start, S.col[keep]))
    rows = np.concatenate([e[0] for e in edges]) if edges else np.zeros(0, np.int64)
    cols = np.concatenate([e[1] for e in edges]) if edges else np.zeros(0, np.int64)
    graph = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.ravel()]


def _clustered_documents(rng: np.random.Generator, n_terms: int, n: int) -> np.ndarray:
    """Terms x documents: copies of a few stories (exact, scaled, or with one term added),
    empty documents and unrelated ones, interleaved."""
    stories = rng.random((n_terms, int(rng.integers(1, 8)))) * (rng.random((n_terms, 1)) < 0.3)
    kind = rng.choice(5, size=n, p=[0.1, 0.3, 0.15, 0.25, 0.2])
    X = stories[:, rng.integers(0, stories.shape[1], n)]
    X[:, kind == 0] = 0  # empty
    X[:, kind == 2] *= rng.choice([2.0, 3.7], size=int((kind == 2).sum()))  # scaled copies
    edited = np.flatnonzero(kind == 3)
    X[rng.integers(0, n_terms, edited.size), edited] += rng.random(edited.size)
    unrelated = np.flatnonzero(kind == 4)
    X[:, unrelated] = rng.random((n_terms, unrelated.size)) * (
        rng.random((n_terms, unrelated.size)) < 0.2
    )
    return X


@pytest.mark.parametrize("seed", range(40))
def test_similar_groups_label_as_when_every_similar_pair_was_kept(seed):
    rng = np.random.default_rng(seed)
    n_terms, n = int(rng.integers(1, 40)), int(rng.integers(0, 150))
    X = _clustered_documents(rng, n_terms, n)
    threshold = float(rng.choice([1.0, 0.999, 0.9, 0.5, 0.2, 0.05, 1e-12]))
    block = int(rng.integers(1, 40))
    given = X if seed % 3 == 0 else sp.csr_matrix(X) if seed % 3 == 1 else sp.csc_matrix(X)
    expected = _similar_groups_keeping_every_pair(sp.csc_matrix(X), threshold, block)
    assert similar_groups(given, threshold, block).tolist() == expected.tolist()


def test_columns_alike_only_in_their_hash_are_not_taken_for_copies():
    # same number of terms, sum of weights, sum of term ids and of weight x (id + 1): cosine 0
    X = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    assert similar_groups(X, 0.5).tolist() == [0, 1]


def _storm(n: int, copies: bool) -> sp.csc_matrix:
    """Terms x documents of a retweet storm: ten shared terms, and each document its own
    mention term (``copies``: none, the documents are exact copies)."""
    rows = np.tile(np.arange(10), n)
    cols = np.repeat(np.arange(n), 10)
    if not copies:
        rows, cols = np.r_[rows, 10 + np.arange(n)], np.r_[cols, np.arange(n)]
    return sp.csc_matrix((np.ones(rows.size), (rows, cols)), shape=(10 + n, n))


# Keeping every similar pair of a storm of n documents until the end held n^2 pairs: at 4,000
# documents a tracemalloc peak of ~640 MiB, whatever the block. Merged block by block the peak is
# ~55 bytes per pair of one block (block x n: ~28 MiB at block 128, 4,000 documents), and exact
# copies are one document to the search (~2 MiB); the bounds leave at least 4x room either way.
@pytest.mark.parametrize(("copies", "bound_mib"), [(False, 128), (True, 16)])
def test_a_storm_of_4000_alike_documents_is_grouped_in_bounded_memory(copies, bound_mib):
    X = _storm(4000, copies)
    tracemalloc.start()
    try:
        labels = similar_groups(X, 0.5, block=128)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not labels.any()
    assert peak < bound_mib * 2**20, f"peak {peak / 2**20:.0f} MiB"


KNOWN = [
    "football match goal striker league",
    "stocks shares market investors trading",
    "rain storm weather forecast cold",
]
STORM = "volcano erupts near the capital lava ash evacuation ordered"
OTHER = "parliament votes new budget tax reform deficit minister"
HOUR = 3_600_000


def _window(seq: int, texts: list[str]) -> ClosedWindow:
    items = [
        Buffered(Document(f"w{seq}-{i}", t, seq * HOUR + 1000 * i, "s"), 0, i)
        for i, t in enumerate(texts)
    ]
    return ClosedWindow("s", seq, seq * HOUR, (seq + 1) * HOUR, items, "watermark")


def _known(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [KNOWN[i] for i in rng.integers(0, len(KNOWN), n)]


def _storm_window(config: DetectorConfig) -> tuple[list, object]:
    """Two warm windows, then one with a retweet storm of 8 copies (prefixes differ) and one
    other new story among known documents: the alerts of that window."""
    models = build_models(config)
    for seq in range(2):
        process_window(models, _window(seq, _known(100, seq)), config)
    copies = [f"RT @user{i}: {STORM}" for i in range(8)]
    texts = _known(100, 9)
    texts[10:10] = copies[:4]
    texts[60:60] = [OTHER]
    texts[80:80] = copies[4:]
    comp = process_window(models, _window(2, texts), config)
    return [a for a in comp.alerts if a["kind"] == "novel_document"], comp


def test_a_retweet_storm_is_one_alert_led_by_its_most_novel_copy():
    config = DetectorConfig(
        warmup_documents=100, initial_atoms=6, novel_top_q=0.09, emerging_topics=False
    )
    alerts, comp = _storm_window(config)
    docs = comp.documents
    flagged = [d for d, n in zip(docs.doc_id, docs.novel, strict=True) if n]
    text = dict(zip(docs.doc_id, docs.text, strict=True))
    storm = [d for d in flagged if STORM in text[d]]
    assert len(storm) == 8 and any(text[d] == OTHER for d in flagged)
    (story,) = [a for a in alerts if STORM in text[a["subject_id"]]]
    assert story["n_documents"] == 8
    assert sorted([story["subject_id"], *story["related_ids"]]) == sorted(storm)
    score = dict(zip(docs.doc_id, docs.novelty_score, strict=True))
    assert story["score"] == max(score[d] for d in storm) == score[story["subject_id"]]
    order = {d: i for i, d in enumerate(docs.doc_id)}  # event time follows the row here
    assert story["related_ids"] == sorted(story["related_ids"], key=order.get)
    assert {"volcano", "erupts", "lava"} <= {t for t, _ in story["terms"]}
    # every flagged document is in exactly one alert
    members = [d for a in alerts for d in (a["subject_id"], *a["related_ids"])]
    assert sorted(members) == sorted(flagged)
    assert sum(a["n_documents"] for a in alerts) == len(flagged)

    separate, comp_off = _storm_window(DetectorConfig(**{**config.__dict__, "novel_similarity": 0}))
    assert len(separate) == int(comp_off.documents.novel.sum()) == len(flagged)
    assert all(a["n_documents"] == 1 and a["related_ids"] == [] for a in separate)


def test_late_documents_of_one_story_raise_an_alert_each():
    """Late documents are not grouped: which of them a worker hands over together depends on
    when it polled, so a restart would group them otherwise than an uninterrupted run. (The
    story's words joined the vocabulary with one document of the last window, which a fixed
    dictionary, no new atoms, does not explain: the copies are novel, and alike.)"""
    config = DetectorConfig(
        warmup_documents=100, initial_atoms=6, emerging_topics=False, new_atoms_per_window=0
    )
    models = build_models(config)
    process_window(models, _window(0, _known(100, 0)), config)
    texts = _known(100, 1)
    texts[5] = STORM
    process_window(models, _window(1, texts), config)
    late = _window(0, [f"RT @late{i}: {STORM}" for i in range(5)]).items
    rows, alerts = score_late(models, "s", late, HOUR)
    assert rows.novel.all() and similar_groups(
        models.detector.score([STORM] * 2).features, 0.5
    ).tolist() == [0, 0]
    assert [a["subject_id"] for a in alerts] == list(rows.doc_id)
    assert all(a["n_documents"] == 1 and a["related_ids"] == [] for a in alerts)


def test_a_huge_story_lists_at_most_related_ids_others():
    n = RELATED_IDS + 30
    t0 = datetime(2024, 3, 1, tzinfo=UTC)
    docs = DocumentColumns.from_rows(
        [
            {
                "stream": "s",
                "doc_id": f"d{i}",
                "event_time": t0,
                "window_seq": 0,
                "novelty_score": 0.5 + (i == 7),
                "novel": True,
                "text": "copy",
            }
            for i in range(n)
        ]
    )
    features = sp.csc_matrix(np.ones((3, n)))
    (alert,) = novel_alerts(docs, features=features, min_similarity=0.9)
    assert alert["subject_id"] == "d7" and alert["n_documents"] == n
    assert alert["related_ids"] == [f"d{i}" for i in range(n) if i != 7][:RELATED_IDS]


def test_story_fields_are_stored_and_queried(database_url):
    config = DetectorConfig(
        warmup_documents=100, initial_atoms=6, novel_top_q=0.09, emerging_topics=False
    )
    alerts, _ = _storm_window(config)
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.insert_alerts(alerts)
        stored = {a["subject_id"]: a for a in store.alerts(limit=None)}
    for a in alerts:
        got = stored[a["subject_id"]]
        assert (got["n_documents"], got["related_ids"]) == (a["n_documents"], a["related_ids"])


def test_novel_similarity_is_checked_at_load():
    assert (
        load_config(env={"SPARSEWATCH_DETECTOR_NOVEL_SIMILARITY": "0"}).detector.novel_similarity
        == 0
    )
    with pytest.raises(SparsewatchError, match="novel_similarity"):
        load_config(env={"SPARSEWATCH_DETECTOR_NOVEL_SIMILARITY": "1.5"})


def _stored_story(url: str) -> tuple[dict, dict]:
    """The storm window's documents and alerts stored; (the storm's alert, its documents' text)."""
    config = DetectorConfig(
        warmup_documents=100, initial_atoms=6, novel_top_q=0.09, emerging_topics=False
    )
    alerts, comp = _storm_window(config)
    with Store.open(url) as store, store.transaction() as tx:
        tx.insert_documents(comp.documents)
        tx.insert_alerts(alerts)
    text = dict(zip(comp.documents.doc_id, comp.documents.text, strict=True))
    (storm,) = [a for a in alerts if STORM in text[a["subject_id"]]]
    return storm, text


def test_documents_of_a_story_by_its_lead(database_url, monkeypatch, capsys):
    storm, text = _stored_story(database_url)
    args = ("documents", "--database-url", database_url, "--format", "json")
    code, out, err = run_cli(monkeypatch, capsys, *args, "--story", storm["subject_id"])
    assert code == 0, err
    got = [r["doc_id"] for r in json.loads(out)]
    assert sorted(got) == sorted([storm["subject_id"], *storm["related_ids"]])
    assert all(STORM in text[d] for d in got) and err == ""
    # other filters still apply, and a story cut by --limit says so (its listing looked whole:
    # the default 50 of a 72-document story, the newest missing); a document that leads no
    # story is a one-line error
    code, out, err = run_cli(
        monkeypatch, capsys, *args, "--story", storm["subject_id"], "--limit", "3"
    )
    assert code == 0 and len(json.loads(out)) == 3 and err == limit_note(3, "documents")
    n = len(got)
    code, out, err = run_cli(
        monkeypatch, capsys, *args, "--story", storm["subject_id"], "--limit", str(n)
    )
    assert code == 0 and len(json.loads(out)) == n and err == ""
    led = storm["related_ids"][0]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--story", led)
    assert code != 0 and out == ""
    assert err.strip().splitlines() == [f"error: no novel_document alert names document {led!r}"]


def test_a_story_the_alert_lists_in_part_says_so(database_url, monkeypatch, capsys):
    storm, _ = _stored_story(database_url)
    with Store.open(database_url) as store, store.transaction() as tx:
        alert = {**storm, "subject_id": "other-lead", "n_documents": 500, "stream": "t"}
        tx.insert_alerts([alert, {**alert, "stream": "u"}])
    args = ("documents", "--database-url", database_url, "--format", "json")
    code, out, err = run_cli(monkeypatch, capsys, *args, "--story", "other-lead")
    assert code != 0 and "several streams ('t', 'u'): give --stream" in err
    code, out, err = run_cli(monkeypatch, capsys, *args, "--story", "other-lead", "--stream", "t")
    assert code == 0 and json.loads(out) == []  # (its documents were not stored in stream t)
    listed = 1 + len(storm["related_ids"])
    assert err.strip() == f"note: the alert lists {listed} of its story's 500 documents"


def test_alerts_of_big_stories_only(database_url, monkeypatch, capsys):
    """--min-documents keeps the alerts standing for that many documents (one without a count,
    an anomaly's or one stored before revision 0007, stands for one), also when following."""
    storm, _ = _stored_story(database_url)
    with Store.open(database_url) as store, store.transaction() as tx:
        anomaly = {**storm, "kind": "anomaly", "n_documents": None, "related_ids": None}
        tx.insert_alerts([{**anomaly, "terms": None}])
    args = ("alerts", "--database-url", database_url, "--format", "json", "--limit", "100")
    code, out, err = run_cli(monkeypatch, capsys, *args)
    everything = json.loads(out)
    assert code == 0 and {a["kind"] for a in everything} == {"novel_document", "anomaly"}
    largest = max(a["n_documents"] or 1 for a in everything)
    for n in (1, 2, 8, largest, largest + 1):
        code, out, err = run_cli(monkeypatch, capsys, *args, "--min-documents", str(n))
        assert code == 0, err
        want = [a for a in everything if (a["n_documents"] or 1) >= n]
        assert json.loads(out) == want
    assert want == [] and largest > 8  # (the identical known texts tie at the top-q cut)
    with Store.open(database_url) as store, store.reading() as conn:
        follower = AlertFollower(min_documents=8)
        got = {a["subject_id"] for a in follower.start(conn, 10)}
    assert storm["subject_id"] in got
    assert got == {a["subject_id"] for a in everything if (a["n_documents"] or 1) >= 8}
