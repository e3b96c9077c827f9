"""``sparsewatch evaluate`` after a review: a warm-up without terms for the product's detector
is refused (it crashed with a RuntimeError, or step 1 became the detector's warm-up and was
scored by a dictionary fitted on itself); Reuters stories are ordered by the time their date
reads as, not its text, and a missing date is an error; the JSON records the arguments that
define the run; an empty label in a list is no label, as an empty string is."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from sparsewatch.consumers.field_mapping import parse_labels, to_document
from sparsewatch.replay.evaluate import load_jsonl, load_reuters

from sparsewatch.config import DetectorConfig
from sparsewatch.errors import SparsewatchError
from tests.support.evaluate_cli import run_evaluate, write_jsonl

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def _empty_warm_up(path: Path) -> Path:
    """Three documents without text, then twelve of four words each, labelled a, b, c in turn."""
    rows = [{"text": "", "timestamp": i, "labels": ["a"]} for i in range(3)]
    rows += [
        {
            "text": " ".join(WORDS[(5 * i + k) % len(WORDS)] for k in range(4)),
            "timestamp": 3 + i,
            "labels": ["abc"[i % 3]],
        }
        for i in range(12)
    ]
    return write_jsonl(path, rows)


@pytest.mark.parametrize("step", ["2", "6"])
def test_a_warm_up_without_terms_for_the_detector_is_refused(
    monkeypatch, capsys, tmp_path, step
) -> None:
    """A step shorter than the warm-up failed with "RuntimeError: the detector has not finished
    its warm-up" (status 1); a longer one became the detector's warm-up, its AUCs reported."""
    path = _empty_warm_up(tmp_path / "c.jsonl")
    args = ["--corpus", "jsonl", "--path", str(path), "--warmup", "3", "--step", step]
    code, out, err = run_evaluate(monkeypatch, capsys, *args, "--methods", "detector")
    assert code == 2 and out == "", err
    assert err.splitlines()[-1] == (
        "error: jsonl: the warm-up's 3 documents have no terms (empty texts or only stop words),"
        " nothing for detector to learn from; give a larger --warmup"
    )


def _reuters(path: Path, dates: list[tuple[int, str | None]]) -> Path:
    """A Reuters-21578 JSONL file of stories (NEWID, date), each with one topic."""
    rows = [
        {"id": i, "date": d, "title": f"t{i}", "body": "b", "topics": ["grain"]} for i, d in dates
    ]
    return write_jsonl(path, rows)


def test_reuters_stories_are_ordered_by_time_whatever_the_date_is_written_as(tmp_path) -> None:
    """Sorted as text, Reuters' own dates (what ``read_reuters_sgml`` writes) went after every
    ISO date of 1987 and among themselves by day of the month."""
    path = _reuters(
        tmp_path / "r.jsonl",
        [
            (5, "1987-03-01T00:00:00"),
            (4, "01-MAR-1987 00:00:00.00"),  # the same instant as NEWID 5: NEWID first
            (3, "26-FEB-1987 15:01:01.79"),
            (2, "1987-02-26T15:01:01"),
            (1, "27-FEB-1987 09:00:00.00"),
        ],
    )
    assert [doc["id"] for doc in load_reuters(path)] == ["2", "3", "1", "4", "5"]


@pytest.mark.parametrize("date", [None, "yesterday"])
def test_a_reuters_story_without_a_readable_date_is_an_error(tmp_path, date) -> None:
    """A missing date sorted last as "None", a bad one by its text, in silence."""
    path = _reuters(tmp_path / "r.jsonl", [(1, "1987-02-26T15:01:01"), (2, date)])
    with pytest.raises(SparsewatchError, match=r"r\.jsonl: line 2: 'date': bad timestamp") as exc:
        load_reuters(path)
    assert "\n" not in str(exc.value)


def test_the_json_records_the_arguments_of_a_synthetic_run(monkeypatch, capsys, tmp_path) -> None:
    """Runs with another --seed or --kind into one --out wrote synthetic.json alike."""
    out = tmp_path / "out"
    args = ["--docs", "80", "--kind", "news", "--seed", "3", "--warmup", "20", "--step", "20"]
    code, _, err = run_evaluate(
        monkeypatch, capsys, *args, "--max-steps", "2", "--methods", "nn-exact", "--out", str(out)
    )
    assert code == 0, err
    arguments = json.loads((out / "synthetic.json").read_text())["protocol"]["arguments"]
    assert arguments == {
        "corpus": "synthetic",
        "path": None,
        "docs": 80,
        "kind": "news",
        "seed": 3,
        "warmup": 20,
        "step": 20,
        "max_steps": 2,
        "methods": ["nn-exact"],
        "detector": None,
    }


def test_the_json_records_the_file_and_the_detector_configuration(
    monkeypatch, capsys, tmp_path
) -> None:
    path = _empty_warm_up(tmp_path / "c.jsonl")
    monkeypatch.chdir(tmp_path)
    args = ["--corpus", "jsonl", "--path", "c.jsonl", "--warmup", "6", "--step", "3"]
    code, out, err = run_evaluate(monkeypatch, capsys, *args, "--methods", "nn-exact,detector")
    assert code == 0, err
    arguments = json.loads(out)["protocol"]["arguments"]
    assert arguments["path"] == str(path)  # absolute: the run may be read from anywhere
    assert (arguments["docs"], arguments["kind"], arguments["seed"]) == (None, None, None)
    assert (arguments["warmup"], arguments["step"], arguments["max_steps"]) == (6, 3, 7)
    assert arguments["methods"] == ["nn-exact", "detector"]
    assert arguments["detector"] == asdict(DetectorConfig())  # the configuration's [detector]


@pytest.mark.parametrize(
    ("value", "labels"),
    [
        ([""], []),
        (["a", " ", "", "b"], ["a", "b"]),
        ('["", "b"]', ["b"]),  # a CSV cell of ``sparsewatch documents --format csv``
        ("", []),
        (" ; a", ["a"]),
    ],
)
def test_an_empty_label_is_no_label(value, labels) -> None:
    assert parse_labels(value) == labels


def test_a_document_whose_labels_are_empty_is_not_evaluated(tmp_path) -> None:
    """``"labels": [""]`` made a known-topic negative of a document ``"labels": ""`` left out;
    the live pipeline's document messages (made by ``to_document``) drop it alike."""
    rows = [{"text": "a b", "timestamp": 0, "labels": [""]}, {"text": "c", "timestamp": 1}]
    assert [d["labels"] for d in load_jsonl(write_jsonl(tmp_path / "c.jsonl", rows))] == [[], []]
    assert to_document({"id": 1, "text": "x", "timestamp": 0, "labels": ["", "a"]})["labels"] == [
        "a"
    ]
