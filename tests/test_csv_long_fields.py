"""CSV fields longer than the csv module's default limit (131,072 characters)."""

from __future__ import annotations

import csv
from pathlib import Path

from sparsewatch.replay.documents import read_documents
from sparsewatch.replay.readers import Rejected, SourceRecord, read_csv


def _write(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([["id", "text", "timestamp"], *rows])
    return path


def _long_text(chars: int) -> str:
    """Text of at least ``chars`` characters over several lines, with quotes inside."""
    line = 'a "quoted" word and more words, ' * 40 + "\n"
    return line * (chars // len(line) + 1)


def test_a_text_over_131072_characters_is_read(tmp_path: Path) -> None:
    """The csv module's default limit rejected it, although the detector's limit
    (``max_text_bytes``) may be configured higher."""
    text = _long_text(300_000)
    path = _write(tmp_path / "d.csv", [["a", text, "2020-01-01T00:00:00Z"]])
    (record,) = read_csv(path)
    assert isinstance(record, SourceRecord) and record.fields["text"] == text
    (doc,) = read_documents([path], max_text_bytes=400_000)
    assert doc["text"] == text


def test_records_after_an_over_limit_quoted_field_are_read(
    tmp_path: Path, small_field_limit: int
) -> None:
    """The parser resumed inside the field, read its rest as records and swallowed the next
    record in a quoted field that never closed."""
    path = _write(
        tmp_path / "d.csv",
        [
            ["a", "short", "2020-01-01T00:00:00Z"],
            ["b", _long_text(5 * small_field_limit), "2020-01-02T00:00:00Z"],
            ["c", "after", "2020-01-03T00:00:00Z"],
            ["d", 'also "after"', "2020-01-04T00:00:00Z"],
        ],
    )
    records = list(read_csv(path))
    assert [type(r) for r in records] == [SourceRecord, Rejected, SourceRecord, SourceRecord]
    assert "field larger than field limit" in records[1].reason and records[1].line == 3
    assert [r.fields["id"] for r in records if isinstance(r, SourceRecord)] == ["a", "c", "d"]
    assert records[3].fields["text"] == 'also "after"'


def test_an_over_limit_unquoted_field_rejects_only_its_line(
    tmp_path: Path, small_field_limit: int
) -> None:
    path = tmp_path / "d.csv"
    path.write_text(
        "id,text,timestamp\n"
        f"a,{'x' * (2 * small_field_limit)},2020-01-01T00:00:00Z\n"
        "b,next,2020-01-02T00:00:00Z\n"
    )
    records = list(read_csv(path))
    assert [type(r) for r in records] == [Rejected, SourceRecord]
    assert records[0].line == 2 and records[1].fields["id"] == "b"


def test_an_over_limit_field_the_file_ends_inside_rejects_the_rest(
    tmp_path: Path, small_field_limit: int
) -> None:
    """An unclosed quote: everything after it is one record, rejected (nothing invented)."""
    path = tmp_path / "d.csv"
    path.write_text(
        'id,text,timestamp\na,"' + "long line\n" * small_field_limit + "b,next,2020-01-02\n"
    )
    records = list(read_csv(path))
    assert len(records) == 1 and isinstance(records[0], Rejected) and records[0].line == 2
