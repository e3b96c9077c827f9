"""``sparsewatch evaluate``'s corpus loaders and options: timestamps and labels read as the replay
tool reads them, bad files and arguments reported in one line before any work."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.replay.evaluate import load_jsonl, load_reuters

from sparsewatch.cli import cli
from sparsewatch.errors import SparsewatchError


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_documents_are_ordered_by_their_instant_not_their_spelling(tmp_path: Path) -> None:
    """Timestamps were sorted as strings: an offset, or epoch milliseconds next to ISO dates,
    put documents out of time order."""
    rows = [
        {"id": "a", "text": "x", "timestamp": "2020-01-01T10:00:00+05:00"},  # 05:00 UTC
        {"id": "b", "text": "x", "timestamp": "2020-01-01T06:00:00Z"},
        {"id": "c", "text": "x", "timestamp": parse_timestamp_ms("2020-01-01T05:30:00Z")},
        {"id": "d", "text": "x", "timestamp": "2020-01-01T04:00:00-03:00"},  # 07:00 UTC
        {"id": "e", "text": "x", "timestamp": "2020-01-01T06:00:00Z"},  # tie with b: file order
    ]
    docs = load_jsonl(_jsonl(tmp_path / "c.jsonl", rows))
    assert [d["id"] for d in docs] == ["a", "c", "b", "e", "d"]
    times = [parse_timestamp_ms(d["timestamp"]) for d in docs]
    assert times == sorted(times)


def test_labels_as_a_separated_string_are_split(tmp_path: Path) -> None:
    """A label string was taken character by character (set('earn') = {'e', 'a', 'r', 'n'})."""
    rows = [
        {"text": "x", "timestamp": 1, "labels": "earn;grain"},
        {"text": "x", "timestamp": 2, "labels": ["acq", 7]},
        {"text": "x", "timestamp": 3},
        {"text": "x", "timestamp": 4, "labels": "ship | crude"},
    ]
    docs = load_jsonl(_jsonl(tmp_path / "c.jsonl", rows))
    assert [d["labels"] for d in docs] == [["earn", "grain"], ["acq", "7"], [], ["ship", "crude"]]


def test_gzip_corpora_are_read(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(json.dumps({"text": "x", "timestamp": 5, "labels": ["a"]}) + "\n")
    assert load_jsonl(path) == [{"text": "x", "timestamp": 5, "labels": ["a"]}]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not json", "line 2: invalid JSON"),
        ('{"text": "x", "timestamp": "yesterday"}', "line 2: bad timestamp"),
        ('{"text": "x", "timestamp": 1, "labels": {"a": 1}}', "line 2: labels must be"),
        ('{"text": 3, "timestamp": 1}', "line 2: 'text' is int, not a string"),
        ('{"text": "x"}', "line 2 lacks 'text' or 'timestamp'"),
        ("[1, 2]", "line 2: not a JSON object"),
    ],
)
def test_a_bad_line_is_an_error_naming_it(tmp_path: Path, line: str, reason: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"text": "ok", "timestamp": 0}) + "\n" + line + "\n")
    with pytest.raises(SparsewatchError, match=f"^{path}: ") as err:
        load_jsonl(path)
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_a_file_that_is_not_the_reuters_jsonl_is_an_error_naming_the_line(tmp_path: Path) -> None:
    """It was a bare KeyError: 'topics'."""
    path = _jsonl(tmp_path / "r.jsonl", [{"id": 1, "text": "x", "timestamp": 1}])
    with pytest.raises(SparsewatchError, match="line 1 is not a record of the Reuters-21578"):
        load_reuters(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-steps", "0"], "Invalid value for '--max-steps'"),
        (["--warmup", "0"], "Invalid value for '--warmup'"),
        (["--step", "-5"], "Invalid value for '--step'"),
        (["--docs", "0"], "Invalid value for '--docs'"),
        (["--seed", "-1"], "Invalid value for '--seed'"),
        (["--methods", " , "], "name at least one method"),
    ],
)
def test_bad_arguments_are_usage_errors_before_any_work(args: list[str], message: str) -> None:
    """``--max-steps 0`` fitted every method's warm-up, then failed with 'ValueError: need at
    least one array to concatenate'; ``--seed -1`` failed inside numpy; ``--methods ,`` printed
    an empty result."""
    result = CliRunner().invoke(cli, ["evaluate", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "warm-up" not in result.output  # nothing was fitted


def test_unknown_methods_are_refused_before_the_corpus_is_read(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "evaluate",
            "--corpus",
            "jsonl",
            "--path",
            str(tmp_path / "absent.jsonl"),
            "--methods",
            "nn-exact,bogus",
        ],
    )
    assert isinstance(result.exception, SparsewatchError)
    assert "unknown method(s) ['bogus']" in str(result.exception)
