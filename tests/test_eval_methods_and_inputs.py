"""Evaluation: documents without terms score 0 under every method (the nearest-neighbour
peers scored them 1), ``EstimatorMethod(score_fn=...)`` still learns, the SRE is Eq. (3)'s
optimum (the detector's margin and ONLINE/BATCH's ``over_weight``), an unusable ``--out`` is
a usage error before any work, and a Reuters file that cannot be decoded, or whose topics are
not a list, is a clear error."""

from __future__ import annotations

import codecs
import gzip
import json

import numpy as np
import pytest
from click.testing import CliRunner
from sparsewatch.models.first_story import ExactFirstStory
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.window_detector import Detector
from sparsewatch.replay.eval_methods import DetectorMethod, SharedTfidf, build_methods, l1_sre
from sparsewatch.replay.evaluate import EstimatorMethod, load_reuters
from sparsewatch.replay.synthetic import generate_stream

from sparsewatch.commands_evaluate import evaluate
from sparsewatch.errors import SparsewatchError

EMPTY = " ,,, !!! ... "  # nothing survives tokenisation


def _texts(n: int, seed: int = 0) -> list[str]:
    return [d["text"] for d in generate_stream(n, kind="tweet", seed=seed)]


def test_documents_without_terms_score_zero_under_every_method() -> None:
    texts = _texts(450)
    warm, step = texts[:300], texts[300:450]
    empties = [5, 40, 77]
    for i in empties:
        step[i] = EMPTY
    features = SharedTfidf()
    features.partial_fit(warm)
    X0 = features.transform(warm)
    features.partial_fit(step)
    X = features.transform(step)
    assert all(X[i].nnz == 0 for i in empties)
    names = ["nn-exact", "nn-lsh", "online", "detector"]
    methods = build_methods(names, {"online": {"n_components": 20}})
    raw = ExactFirstStory().fit(X0).score_samples(X)
    assert np.all(raw[empties] == 1.0)  # the memory itself: cosine 0 with everything
    others = np.setdiff1d(np.arange(len(step)), empties)
    for name, method in methods.items():
        method.warm_up(None if method.uses_text else X0, warm)
        scores = np.asarray(method.step(None if method.uses_text else X, step))
        np.testing.assert_array_equal(scores[empties], 0.0, err_msg=name)
        assert np.all(scores[others] > 0), name
        if name == "nn-exact":  # documents with terms keep the memory's score
            np.testing.assert_allclose(scores[others], raw[others], atol=1e-12)


def test_estimator_method_with_score_fn_still_learns() -> None:
    texts = _texts(500, seed=1)
    features = SharedTfidf()
    features.partial_fit(texts[:300])
    X0 = features.transform(texts[:300])
    features.partial_fit(texts[300:])
    X1 = features.transform(texts[300:])
    method = EstimatorMethod(ExactFirstStory(), score_fn=lambda m, X: m.score_samples(X))
    method.warm_up(X0, texts[:300])
    first = method.step(X1, texts[300:])
    np.testing.assert_allclose(first, ExactFirstStory().fit(X0).score_samples(X1), atol=1e-12)
    assert method.estimator.memory_.shape[0] == 500  # the step was stored
    again = method.step(X1, texts[300:])  # the same documents again: all known now
    np.testing.assert_allclose(again, 0.0, atol=1e-12)
    assert method.estimator.memory_.shape[0] == 700


def test_detector_sre_is_the_objective_without_the_screening_margin() -> None:
    texts = _texts(300)
    method = DetectorMethod(
        Detector(model=OnlineL1NoveltyDetector(n_components=20, grow_threshold=None))
    )
    method.warm_up(None, texts)
    unknown = [f"zq{i}a zq{i}b zq{i}c xylo{i}" for i in range(20)]  # words of no atom
    scores = method.step(None, unknown)
    assert np.all(scores > 1.0)  # objective 1 plus the margin: the product's tie-break
    # unit-l1 documents: Eq. (3) at x = 0 is 1, its largest value
    assert method.sre(None, unknown) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("name", ["online", "batch"])
def test_l1_sre_uses_the_estimators_weighted_loss(name: str) -> None:
    texts = _texts(400)
    features = SharedTfidf()
    features.partial_fit(texts[:300])
    X0 = features.transform(texts[:300])
    features.partial_fit(texts[300:])
    X = features.transform(texts[300:])
    method = build_methods([name], {name: {"n_components": 20, "over_weight": 0.3}})[name]
    method.warm_up(X0, texts[:300])
    method.step(X, texts[300:])
    own = float(np.mean(method.estimator.code(X).objective))
    assert l1_sre(method.estimator, X) == pytest.approx(own, rel=1e-5)


def test_evaluate_refuses_an_unusable_out_folder_before_any_work(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    args = ["--docs", "60", "--warmup", "30", "--step", "10", "--max-steps", "1"]
    args += ["--methods", "nn-exact", "--out", str(blocker / "sub")]
    result = CliRunner().invoke(evaluate, args)
    assert result.exit_code == 2, result.output
    assert "'--out'" in result.output and "cannot create" in result.output
    assert "warm-up" not in result.output  # no progress line: nothing was evaluated


def test_reuters_file_that_cannot_be_decoded_is_an_error_naming_it(tmp_path) -> None:
    truncated = tmp_path / "truncated.jsonl.gz"
    truncated.write_bytes(gzip.compress(b'{"id": "' + b"x" * 100_000 + b'"}\n')[:40])
    not_utf8 = tmp_path / "latin1.jsonl"
    not_utf8.write_bytes(b'{"id": "\xff"}\n')
    for path in (truncated, not_utf8):
        with pytest.raises(SparsewatchError, match="cannot be read as") as info:
            load_reuters(path)
        assert str(path) in str(info.value)


def test_reuters_file_is_read_as_replay_reads_jsonl(tmp_path) -> None:
    """Gzip was known by the name and every line was parsed: a gzip file named .jsonl, a plain
    one named .gz, a byte-order mark or a blank line was refused, where --corpus jsonl and
    replay read the same file."""
    record = {"id": "1", "title": "t", "body": "b", "date": "1987-02-26T15:01:01"}
    line = (json.dumps({**record, "topics": ["grain"]}) + "\n").encode()
    files = {
        "gzip.jsonl": gzip.compress(line),
        "plain.jsonl.gz": line,
        "bom.jsonl": codecs.BOM_UTF8 + line,
        "blank.jsonl": line + b"\n  \n",
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
        assert [d["labels"] for d in load_reuters(tmp_path / name)] == [["grain"]], name


def test_reuters_topics_must_be_a_list(tmp_path) -> None:
    """A string's labels were its characters ("grain" -> g, r, a, i, n)."""
    path = tmp_path / "corpus.jsonl"
    record = {"id": "1", "title": "t", "body": "b", "date": "1987-02-26T15:01:01"}
    path.write_text(json.dumps({**record, "topics": "grain"}) + "\n")
    with pytest.raises(SparsewatchError, match=r"line 1 .*'topics' is str, not a list"):
        load_reuters(path)
    path.write_text(json.dumps({**record, "topics": ["grain"]}) + "\n")
    assert load_reuters(path)[0]["labels"] == ["grain"]
