"""``sparsewatch evaluate`` used as a data scientist would on small corpora: a corpus
without labels (every AUC null, exit status 0) and a warm-up without terms (a ValueError from
scikit-learn) are one-line errors before any method runs; ``--path`` without ``--corpus`` (the
synthetic stream was evaluated instead of the file) and a synthetic-only option with a file are
usage errors; a CSV file is read (it was "line 1: invalid JSON"); a corpus in which no evaluated
document is novel writes its ROC plot without a warning on stderr; the progress lines show both
AUCs alike."""

from __future__ import annotations

import csv
import gzip
import io
import json
import warnings

import numpy as np
import pytest
from sparsewatch.replay.eval_methods import SharedTfidf, build_methods
from sparsewatch.replay.evaluate import Corpus, evaluate_corpus, load_jsonl, plot_results
from sparsewatch.replay.synthetic import generate_stream

from tests.support.evaluate_cli import run_evaluate, write_jsonl

SMALL = ["--warmup", "20", "--step", "20", "--max-steps", "2"]


@pytest.fixture
def stream() -> list[dict]:
    return generate_stream(60, seed=1)


@pytest.mark.parametrize("labels", ["empty", "absent", "other field"])
def test_a_corpus_without_labels_is_a_one_line_error(
    monkeypatch, capsys, tmp_path, stream, labels
) -> None:
    """Every AUC was null and the status 0: a corpus whose labels are under another name (a
    common "label") looked evaluated."""
    rows = {
        "empty": [{**d, "labels": []} for d in stream],
        "absent": [{k: v for k, v in d.items() if k != "labels"} for d in stream],
        "other field": [{**d, "labels": None, "label": d["labels"][0]} for d in stream],
    }[labels]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    args = ["--corpus", "jsonl", "--path", str(path), *SMALL, "--methods", "nn-exact"]
    code, out, err = run_evaluate(monkeypatch, capsys, *args, "--out", str(tmp_path / "out"))
    # one line: no method was warmed up (each says so on stderr)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: jsonl: no document after the warm-up has a label (field 'labels'")
    assert not list((tmp_path / "out").iterdir())


def test_labels_only_in_the_warm_up_are_still_refused(monkeypatch, capsys, tmp_path, stream):
    rows = [{**d, "labels": d["labels"] if i < 20 else []} for i, d in enumerate(stream)]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    args = ["--corpus", "jsonl", "--path", str(path), *SMALL, "--methods", "nn-exact"]
    code, _, err = run_evaluate(monkeypatch, capsys, *args)
    assert code == 2 and "no document after the warm-up has a label" in err


@pytest.mark.parametrize("text", ["", "the a of and to"])
def test_a_warm_up_without_terms_is_a_one_line_error(
    monkeypatch, capsys, tmp_path, stream, text
) -> None:
    """Each feature-based method failed with "ValueError: Found array with 0 feature(s)"."""
    rows = [{**d, "text": text if i < 20 else d["text"]} for i, d in enumerate(stream)]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    methods = "detector,nn-exact,online"
    args = ["--corpus", "jsonl", "--path", str(path), *SMALL, "--methods", methods]
    code, out, err = run_evaluate(monkeypatch, capsys, *args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: jsonl: the warm-up's 20 documents have no terms")
    assert "nn-exact, online" in err and "detector" not in err and "--warmup" in err


def test_a_warm_up_without_terms_is_refused_for_the_detector_alone(
    monkeypatch, capsys, tmp_path, stream
) -> None:
    """Step 1 became the detector's warm-up, scored by a dictionary fitted on itself."""
    rows = [{**d, "text": "" if i < 20 else d["text"]} for i, d in enumerate(stream)]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    args = ["--corpus", "jsonl", "--path", str(path), *SMALL, "--methods", "detector"]
    code, out, err = run_evaluate(monkeypatch, capsys, *args)
    assert code == 2 and out == "", err
    assert err.splitlines()[-1].startswith("error: jsonl: the warm-up's 20 documents have no terms")
    assert "nothing for detector to learn from" in err


@pytest.mark.parametrize(
    ("args", "option", "message"),
    [
        # the synthetic stream was evaluated, and the file never read
        (["--path", "mine.jsonl"], "--path", "the synthetic corpus is generated, not read"),
        (["--corpus", "jsonl", "--path", "mine.jsonl", "--docs", "50"], "--docs", "jsonl"),
        (["--corpus", "jsonl", "--path", "mine.jsonl", "--kind", "news"], "--kind", "jsonl"),
        (["--corpus", "reuters", "--seed", "3"], "--seed", "only for --corpus synthetic"),
    ],
)
def test_an_option_the_corpus_does_not_read_is_a_usage_error(
    monkeypatch, capsys, args, option, message
) -> None:
    code, out, err = run_evaluate(monkeypatch, capsys, *args, "--methods", "nn-exact")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"error: Invalid value for '{option}': ") and message in err


def test_synthetic_options_with_the_synthetic_corpus_are_fine(monkeypatch, capsys) -> None:
    args = ["--docs", "60", "--kind", "news", "--seed", "2", *SMALL, "--methods", "nn-exact"]
    code, out, err = run_evaluate(monkeypatch, capsys, *args)
    assert code == 0, err
    assert json.loads(out)["corpus"] == "synthetic"


@pytest.mark.parametrize("name", ["c.csv", "C.CSV.gz"])
def test_a_csv_corpus_is_read(tmp_path, stream, name) -> None:
    """A CSV file was refused: "line 1: invalid JSON"."""
    path = tmp_path / name
    rows = [[d["id"], d["text"], d["timestamp"], ";".join(d["labels"])] for d in reversed(stream)]
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(["id", "text", "timestamp", "labels"])
    writer.writerows(rows)
    data = text.getvalue().encode("utf-8")
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    docs = load_jsonl(path)
    assert [d["id"] for d in docs] == [d["id"] for d in stream]  # in time order
    assert [d["labels"] for d in docs] == [d["labels"] for d in stream]
    assert [d["text"] for d in docs] == [d["text"] for d in stream]


def test_a_csv_corpus_is_evaluated(monkeypatch, capsys, tmp_path, stream) -> None:
    path = tmp_path / "c.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "timestamp", "labels"])
        writer.writerows([d["text"], d["timestamp"], "|".join(d["labels"])] for d in stream)
    args = ["--corpus", "jsonl", "--path", str(path), *SMALL, "--methods", "nn-exact"]
    code, out, err = run_evaluate(monkeypatch, capsys, *args)
    assert code == 0, err
    auc = json.loads(out)["methods"]["nn-exact"]["pooled_auc_none"]
    assert 0.5 < auc <= 1


def test_no_novel_document_writes_the_plots_without_a_warning(tmp_path, stream) -> None:
    """The ROC panel had no curve, and ``legend()`` warned on stderr ("No artists with labels
    found to put in legend"), with the source line."""
    docs = [{**d, "labels": ["same"]} for d in stream]
    step_of = np.r_[np.zeros(20, int), np.ones(20, int), np.full(20, 2)]
    methods = build_methods(["nn-exact", "l2-batch"])
    result = evaluate_corpus(Corpus("tiny", docs, step_of), methods, SharedTfidf())
    assert all(m["pooled_auc_none"] is None for m in result["methods"].values())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = plot_results(result, tmp_path / "tiny")
    assert [p.name for p in paths] == ["tiny_roc.png", "tiny_steps.png"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_progress_lines_show_both_aucs_alike(stream) -> None:
    """``auc_any`` was the float's repr (0.7916666666666666) or ``None``, next to
    ``auc_none=0.792`` or ``n/a``."""
    step_of = np.r_[np.zeros(20, int), np.ones(20, int), np.full(20, 2)]
    lines: list[str] = []
    docs = [{**d, "labels": ["same"] if i >= 40 else d["labels"]} for i, d in enumerate(stream)]
    result = evaluate_corpus(
        Corpus("tiny", docs, step_of), build_methods(["nn-exact"]), SharedTfidf(), lines.append
    )
    steps = [line for line in lines if " step " in line]
    auc = result["methods"]["nn-exact"]["auc_any"][0]
    assert (
        f"auc_none={result['methods']['nn-exact']['auc_none'][0]:.3f} auc_any={auc:.3f}"
        in (steps[0])
    )
    assert steps[1].endswith("auc_none=n/a auc_any=n/a")  # step 2 has no novel document
