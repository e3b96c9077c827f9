"""Why a document is novel: the terms its l1 code leaves unexplained (models.unexplained), named in
its ``novel_document`` alert (``alerts.terms``, revision 0007) and shown by ``sparsewatch alerts``;
an emerging topic's alert carries its top terms the same way."""

from __future__ import annotations

import copy
import csv
import io
import json
from datetime import UTC, datetime

import numpy as np
import pytest
import scipy.sparse as sp
import sqlalchemy as sa
from sparsewatch.consumers.detector_core import build_models, process_window, score_late
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.windowing import Buffered, ClosedWindow
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.unexplained import top_unexplained
from sparsewatch.models.window_detector import Detector
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage import migrate
from sparsewatch.storage.engine import create_engine
from sparsewatch.storage.store import Store

from sparsewatch.config import DetectorConfig
from tests.support.cli import run_cli

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def _brute_force(
    P: np.ndarray, A: np.ndarray, X: np.ndarray, n_top: int, min_share: float = 1e-3
) -> list[list[int]]:
    """Per column of ``P`` the rows of the ``n_top`` largest ``P - A X^T`` above ``min_share``
    of the column's sum, by decreasing value, ties by lower row: every entry of the dense
    residual sorted."""
    R = P - A @ X.T
    out = []
    for j in range(P.shape[1]):
        floor = min_share * P[:, j].sum()
        order = sorted(range(P.shape[0]), key=lambda i: (-R[i, j], i))
        out.append([i for i in order if R[i, j] > floor][:n_top])
    return out


@pytest.mark.parametrize("sparse_dictionary", [False, True])
@pytest.mark.parametrize("block", [1, 7, 1000])
def test_top_unexplained_matches_the_dense_residual(sparse_dictionary, block):
    rng = np.random.default_rng(3)
    m, n, k, n_top = 40, 60, 6, 4
    P = sp.random(m, n, density=0.15, random_state=4, format="lil", dtype=np.float32)
    A = rng.random((m, k)) * (rng.random((m, k)) < 0.4)
    X = sp.random(n, k, density=0.4, random_state=5, format="csr") * 0.3
    P[:, 5] = 0  # a document without terms: nothing unexplained
    P = P.tocsc()
    rows, mass = top_unexplained(
        P, sp.csc_matrix(A) if sparse_dictionary else A, X, n_top, block=block
    )
    expected = _brute_force(P.toarray().astype(np.float64), A, X.toarray(), n_top)
    R = P.toarray() - A @ X.T.toarray()
    for j, want in enumerate(expected):
        got = rows[j][rows[j] >= 0].tolist()
        assert got == want
        np.testing.assert_allclose(mass[j][: len(want)], R[want, j], rtol=1e-6)
        assert (rows[j][len(want) :] == -1).all() and (mass[j][len(want) :] == 0).all()
    assert rows[5].tolist() == [-1] * n_top
    assert any(len(w) == n_top for w in expected) and any(0 < len(w) < n_top for w in expected)


def test_a_term_explained_within_the_codings_tolerance_is_not_named():
    """A residual of a few 1e-9 (the coding stops within a tolerance) is no reason; a term
    unexplained by more than ``min_share`` of the document's weight is."""
    P = sp.csc_matrix(np.array([[0.5], [0.3], [0.2]]))
    A = np.array([[1.0], [0.0], [0.0]])
    X = sp.csr_matrix(np.array([[0.5 - 4e-9]]))  # term 0 explained but for 4e-9
    rows, mass = top_unexplained(P, A, X, 3)
    assert rows[0].tolist() == [1, 2, -1] and mass[0].tolist() == [0.3, 0.2, 0.0]
    rows, _ = top_unexplained(P, A, X, 3, min_share=0.0)
    assert rows[0].tolist() == [1, 2, 0]
    rows, _ = top_unexplained(P, A, X, 3, min_share=0.25)  # 0.2 is below a quarter of 1.0
    assert rows[0].tolist() == [1, -1, -1]
    with pytest.raises(ValueError, match="min_share"):
        top_unexplained(P, A, X, 3, min_share=float("nan"))


def test_top_unexplained_refuses_mismatched_shapes():
    P = sp.csc_matrix(np.ones((4, 3)))
    with pytest.raises(ValueError, match="shapes do not match"):
        top_unexplained(P, np.ones((5, 2)), sp.csr_matrix((3, 2)), 2)
    with pytest.raises(ValueError, match="shapes do not match"):
        top_unexplained(P, np.ones((4, 2)), sp.csr_matrix((2, 2)), 2)


KNOWN = [
    "football match goal striker league",
    "stocks shares market investors trading",
    "rain storm weather forecast cold",
]
NEW_STORY = "volcano erupts lava ash evacuation near football league"


def _window(n: int, seed: int, extra: list[str] = ()) -> list[str]:
    rng = np.random.default_rng(seed)
    return [KNOWN[i] for i in rng.integers(0, len(KNOWN), n - len(extra))] + list(extra)


def _detector(n_novel_terms: int = 5) -> Detector:
    model = OnlineL1NoveltyDetector(n_components=6, top_q=0.05, random_state=0)
    return Detector(model=model, warmup_docs=60, n_novel_terms=n_novel_terms)


def test_a_novel_document_is_explained_by_its_new_words():
    detector = _detector()
    detector.process_window(_window(60, 0))
    detector.process_window(_window(60, 1))
    texts = _window(60, 2, [NEW_STORY])
    result = detector.process_window(texts)
    new = len(texts) - 1
    assert result.novel[new]
    assert set(result.novel_terms) == set(np.flatnonzero(result.novel).tolist())
    words = [t for t, _ in result.novel_terms[new]]
    assert set(words) == {"volcano", "erupts", "lava", "ash", "evacuation"}
    masses = [w for _, w in result.novel_terms[new]]
    assert masses == sorted(masses, reverse=True) and masses[-1] > 0
    # the known words of the story are explained by the atoms: not named
    assert not {"football", "league"} & set(words)


def test_novel_terms_come_from_the_dictionary_before_the_windows_update():
    """The terms are the residual of the code the score came from: against the dictionary the
    window was coded with, not the one learnt from it (which explains the new words better)."""
    docs = [d["text"] for d in generate_stream(900, seed=7)]
    detector = _detector(n_novel_terms=6)
    for start in range(0, 600, 200):
        detector.process_window(docs[start : start + 200])
    before = copy.deepcopy(detector)
    result = detector.process_window(docs[600:800])
    assert result.novel.sum() >= 5
    P = result.features
    A = before.model.padded_components(P.shape[0])
    codes = result.codes
    # the same atoms after the update (growth appends atoms: the codes do not weigh those)
    A_after = detector.model.padded_components(P.shape[0])[:, : codes.shape[1]]
    changed = False
    for d, named in result.novel_terms.items():
        R = P[:, [d]].toarray().ravel() - np.asarray(A @ codes[d].T.toarray()).ravel()
        least = 1e-3 * P[:, [d]].sum()  # (min_share of the document's weight)
        want = sorted(np.flatnonzero(least < R).tolist(), key=lambda i: (-R[i], i))[:6]
        assert [t for t, _ in named] == [str(detector.features.terms_[i]) for i in want]
        np.testing.assert_allclose([w for _, w in named], R[want], rtol=1e-5, atol=1e-9)
        R_after = P[:, [d]].toarray().ravel() - np.asarray(A_after @ codes[d].T.toarray()).ravel()
        changed |= not np.allclose(R_after[want], R[want])
    assert changed  # the update moved the dictionary: the choice of dictionary matters here
    late = detector.score(docs[800:900])
    assert set(late.novel_terms) == set(np.flatnonzero(late.novel).tolist())


def test_no_novel_terms_when_turned_off_or_nothing_is_novel():
    detector = _detector(n_novel_terms=0)
    detector.process_window(_window(60, 0))
    assert detector.process_window(_window(60, 1, [NEW_STORY])).novel_terms == {}
    warmup = _detector().process_window(_window(60, 0))
    assert warmup.warmup and warmup.novel_terms == {}


def _items(texts: list[str], start_ms: int) -> list[Buffered]:
    return [
        Buffered(Document(f"d{start_ms + i}", text, start_ms + i, "s"), 0, start_ms + i)
        for i, text in enumerate(texts)
    ]


def test_window_alerts_carry_the_terms_and_the_store_returns_them(database_url):
    """Through the per-window core into the database and back: every novel_document alert
    names its document's unexplained terms; emerging-topic alerts their topic's terms, as the
    window's topic rows hold them."""
    config = DetectorConfig(warmup_documents=200, initial_atoms=20, n_topics=4, top_terms=5)
    models = build_models(config)
    docs = [d["text"] for d in generate_stream(1200, seed=11)]
    hour = 3_600_000
    computations = []
    for seq in range(6):
        items = _items(docs[seq * 200 : (seq + 1) * 200], seq * hour)
        window = ClosedWindow("s", seq, seq * hour, (seq + 1) * hour, items, "watermark")
        computations.append(process_window(models, window, config))
    novel = [a for c in computations for a in c.alerts if a["kind"] == "novel_document"]
    emerging = [a for c in computations for a in c.alerts if a["kind"] == "emerging_topic"]
    assert len(novel) >= 20 and emerging
    for c in computations:
        texts = dict(zip(c.documents.doc_id, c.documents.text, strict=True))
        for a in (a for a in c.alerts if a["kind"] == "novel_document"):
            assert 1 <= len(a["terms"]) <= 5
            text = texts[a["subject_id"]].lower()  # its own terms (a URL's: its domain)
            assert all(t.removeprefix("url:") in text for t, _ in a["terms"])
        topics = {f"topic-{t['topic_id']}": t["terms"] for t in c.topics}
        for a in (a for a in c.alerts if a["kind"] == "emerging_topic"):
            assert a["terms"] == topics[a["subject_id"]]
            # the terms lead its summary: a table's cut cell still says what the topic is
            named = ", ".join(t for t, _ in a["terms"])
            assert a["summary"].startswith(f"emerging topic: {named} ({a['n_documents']} docs")
    late_rows, late_alerts = score_late(models, "s", _items(docs[:200], 0), hour)
    assert [a["subject_id"] for a in late_alerts] == [
        d for d, n in zip(late_rows.doc_id, late_rows.novel, strict=True) if n
    ]
    assert all(a["terms"] for a in late_alerts)
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            for c in computations:
                tx.insert_alerts(c.alerts)
        with store.transaction() as tx:
            tx.insert_alerts([{**_alert("anomaly", "d1", None), "terms": None}])
        stored = {(a["kind"], a["subject_id"]): a["terms"] for a in store.alerts(limit=None)}
    for a in novel + emerging:
        assert stored[(a["kind"], a["subject_id"])] == [list(p) for p in a["terms"]]
    assert stored[("anomaly", "d1")] is None


def _alert(kind: str, subject: str, terms: list | None) -> dict:
    alert = {"kind": kind, "stream": "s", "subject_id": subject, "score": 0.9, "window_seq": 3}
    return {**alert, "event_time": T0, "summary": f"about {subject}", "terms": terms}


def test_alerts_command_shows_the_terms(database_url, monkeypatch, capsys):
    terms = [["volcano", 0.25], ["lava", 0.125], ["火山", 0.0625]]
    with Store.open(database_url) as store, store.transaction() as tx:
        tx.insert_alerts([_alert("novel_document", "d1", terms), _alert("anomaly", "d2", None)])

    def out(*args: str) -> str:
        args = ("alerts", *args, "--database-url", database_url)
        code, text, err = run_cli(monkeypatch, capsys, *args)
        assert code == 0, err
        return text

    by_subject = {a["subject_id"]: a for a in json.loads(out("--format", "json"))}
    assert by_subject["d1"]["terms"] == terms and by_subject["d2"]["terms"] is None
    rows = {r["subject_id"]: r for r in csv.DictReader(io.StringIO(out("--format", "csv")))}
    assert json.loads(rows["d1"]["terms"]) == terms and rows["d2"]["terms"] == ""
    table = out()
    assert "new: volcano, lava, 火山 · about" in table
    assert "0.25" not in table  # names only in the table


def test_alerts_stored_before_revision_0007_read_without_terms(tmp_path, monkeypatch, capsys):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    try:
        migrate.upgrade(engine, "0006")
        with engine.begin() as conn:  # as sparsewatch wrote it then: no terms column
            conn.execute(
                sa.text(
                    "INSERT INTO alerts (kind, stream, subject_id, score, window_seq, event_time,"
                    " summary, created_at) VALUES ('novel_document', 's', 'old', 0.9, 3,"
                    " '2024-03-01 12:00:00.000000', 'about old', '2024-03-01 12:00:00.000000')"
                )
            )
    finally:
        engine.dispose()
    with Store.open(url) as store:
        assert store.revision() == migrate.head_revision()
        with store.transaction() as tx:
            tx.insert_alerts([_alert("novel_document", "new", [["quake", 0.5]])])
        got = {a["subject_id"]: a["terms"] for a in store.alerts(limit=None)}
    assert got == {"old": None, "new": [["quake", 0.5]]}
    code, text, err = run_cli(monkeypatch, capsys, "alerts", "--database-url", url)
    assert code == 0, err
    assert "quake" in text
