"""Numeric timestamps that read as dates before 1980 (relative times: 0, 1, 2.5 seconds into a
recording) were replayed as moments of 1970 without a word: the replay now says so once, after
its summary, naming the column and the first such value, where it is and what it was read as,
for CSV and JSON lines alike (they share the timestamp parser). Dates are left alone, whatever
their year, and so are the epoch milliseconds of 1987 (Reuters-21578, replayed from its export);
a corpus of epoch seconds read as milliseconds gets the note that says so instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparsewatch.consumers.field_mapping import FieldMapping
from sparsewatch.replay.early_timestamps import EARLIEST_MS, EarlyTimestamps
from sparsewatch.replay.readers import SourceRecord

from tests.support.cli import run_replay
from tests.support.kafka_topics import consume_values

T0 = 1_767_225_600_000  # 2026-01-01


def _replay(monkeypatch, capsys, topic: str, bootstrap: str, corpus: Path, *args: str):
    """``sparsewatch replay CORPUS ARGS --json``: status, the summary, stderr."""
    code, out, err = run_replay(
        monkeypatch, capsys, topic, bootstrap, str(corpus), "--json",
        "--errors", str(corpus.with_name("errors.jsonl")), *args,
    )  # fmt: skip
    assert code == 0, err
    return json.loads(out), err


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("note:")]


@pytest.mark.kafka
def test_relative_csv_times_are_noted_once_with_their_column_and_first_value(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    corpus = tmp_path / "recording.csv"
    rows = ["id,text,time", "a,first,2.5", "b,second,0", "c,third,1700", f"d,absolute,{T0}"]
    corpus.write_text("\n".join(rows) + "\n")
    summary, err = _replay(monkeypatch, capsys, topic_name, kafka_bootstrap, corpus)
    assert summary["produced"] == 4
    assert _notes(err) == [
        "note: 3 records have a number for a timestamp that, read as epoch milliseconds, falls "
        f"before 1980 (first: column 'time' = '2.5' at {corpus} line 2, read as "
        "1970-01-01T00:00:00.002Z): relative times are taken as moments of the 1970s; give "
        "absolute times (epoch milliseconds, epoch seconds with --timestamp-unit s, or ISO-8601)"
    ]
    stamps = {v["id"]: v["timestamp"] for v in consume_values(kafka_bootstrap, topic_name)}
    assert stamps == {"a": 2, "b": 0, "c": 1700, "d": T0}  # read as they were: noted only


@pytest.mark.kafka
def test_relative_seconds_and_a_named_field(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    corpus = tmp_path / "seconds.csv"
    corpus.write_text("id,text,offset_s\na,first,1700.25\n")
    _, err = _replay(
        monkeypatch, capsys, topic_name, kafka_bootstrap, corpus,
        "--timestamp-field", "offset_s", "--timestamp-unit", "s",
    )  # fmt: skip
    assert _notes(err) == [
        "note: 1 record has a number for a timestamp that, read as epoch seconds, falls before "
        f"1980 (first: column 'offset_s' = '1700.25' at {corpus} line 2, read as "
        "1970-01-01T00:28:20.250Z): relative times are taken as moments of the 1970s; give "
        "absolute times (epoch milliseconds, epoch seconds with --timestamp-unit s, or ISO-8601)"
    ]


@pytest.mark.kafka
def test_relative_json_numbers_are_noted_too(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    corpus = tmp_path / "events.jsonl"
    docs = [{"id": "a", "text": "absolute", "timestamp": T0}]
    docs += [{"id": f"r{i}", "text": "relative", "timestamp": i} for i in range(3)]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    _, err = _replay(monkeypatch, capsys, topic_name, kafka_bootstrap, corpus)
    (note,) = _notes(err)
    assert note.startswith(
        "note: 3 records have a number for a timestamp that, read as epoch milliseconds, falls "
        f"before 1980 (first: column 'timestamp' = 0 at {corpus} line 2, read as "
        "1970-01-01T00:00:00.000Z)"
    )


@pytest.mark.kafka
def test_dates_before_1980_and_absolute_numbers_are_not_noted(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    corpus = tmp_path / "history.csv"
    rows = ["id,date,text", "a,1987-02-26T15:01:01Z,iso", "b,19870226,basic date"]
    rows += [f"c,{T0},epoch ms", "d,26-FEB-1987 15:01:01.79,reuters", "e,541350061790,export"]
    corpus.write_text("\n".join(rows) + "\n")
    summary, err = _replay(monkeypatch, capsys, topic_name, kafka_bootstrap, corpus)
    assert summary["produced"] == 5 and err == ""


@pytest.mark.kafka
def test_epoch_seconds_read_as_milliseconds_get_their_own_note_only(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    corpus = tmp_path / "unix.jsonl"
    docs = [{"id": str(i), "text": "t", "timestamp": T0 // 1000 + i} for i in range(2)]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    _, err = _replay(monkeypatch, capsys, topic_name, kafka_bootstrap, corpus)
    assert _notes(err) == [
        "note: read as epoch milliseconds, every timestamp falls in 1970-01-12..1973-03-03; if "
        "they are epoch seconds, replay them with --timestamp-unit s"
    ]


@pytest.mark.parametrize(
    ("value", "noted"),
    [
        (0, True),
        (2.5, True),
        ("  12 ", True),
        ("\x1c5", True),  # (read as 5 ms by the parser; float() refused it: the replay stopped)
        (EARLIEST_MS - 1, True),
        (EARLIEST_MS, False),
        (10**400, False),  # outside 1970..2200: rejected, not noted (it raised OverflowError)
        (float("nan"), False),
        (True, False),
        ("-3", False),
        ("1e3", False),
        ("19750101", False),  # a date (YYYYMMDD), as the parser reads it
        ("1975-01-01", False),
    ],
)
def test_what_counts_as_an_early_number(value, noted: bool) -> None:
    early = EarlyTimestamps(FieldMapping())
    early(SourceRecord("f.jsonl", 1, {"id": "a", "text": "t", "timestamp": value}))
    assert (early.count, early.first is not None) == (int(noted), noted)
