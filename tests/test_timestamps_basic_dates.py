"""A date of eight digits (``20260101``: ISO-8601's basic form, as CSV exports such as GDELT's
``SQLDATE`` write it) was epoch milliseconds to ``replay`` and ``ingest``, a moment of 1970-01-01,
while the detector's message format reads the same text as the date: a corpus of such dates was
replayed into one window of January 1970 without a word. Now the text is the date everywhere; a
number stays epoch milliseconds, and eight digits starting with a year that make no calendar date
are refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparsewatch.consumers.field_mapping import FieldMapping, to_document
from sparsewatch.consumers.messages import RecordError, parse_document
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.replay.documents import read_documents

JAN_1_2026 = 1_767_225_600_000


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("20260101", JAN_1_2026),
        (" 20260102 ", JAN_1_2026 + 86_400_000),
        ("20240229", 1_709_164_800_000),  # a leap day
        ("19700101", 0),
        ("21991231", 7_258_032_000_000),
    ],
)
def test_eight_digits_of_a_date_are_the_date_as_the_message_format_reads_them(
    text: str, expected_ms: int
) -> None:
    assert parse_timestamp_ms(text) == expected_ms
    message = parse_document(json.dumps({"id": "d", "text": "t", "timestamp": text}).encode())
    assert message.timestamp_ms == expected_ms


@pytest.mark.parametrize(
    ("value", "unit_ms", "expected_ms"),
    [
        (20260101, 1, 20_260_101),  # a number is epoch milliseconds, as in the message format
        ("86400000", 1, 86_400_000),  # no year of 1970..2199 first: epoch milliseconds
        ("22000101", 1, 22_000_101),
        ("20260101", 1000, 20_260_101_000),  # declared epoch seconds stay seconds
    ],
)
def test_other_digits_stay_epoch_numbers(value: object, unit_ms: int, expected_ms: int) -> None:
    assert parse_timestamp_ms(value, unit_ms) == expected_ms


@pytest.mark.parametrize("text", ["20260229", "20261301", "20260100"])
def test_eight_digits_of_no_calendar_date_are_refused_with_the_reason(text: str) -> None:
    with pytest.raises(RecordError, match=rf"bad timestamp '{text}' \(a YYYYMMDD date\?"):
        parse_timestamp_ms(text)


def test_a_csv_corpus_of_compact_dates_is_replayed_on_its_days(tmp_path: Path) -> None:
    corpus = tmp_path / "export.csv"
    corpus.write_text("id,text,date\n1,first story,20260101\n2,second story,20260102\n")
    stamps = [d["timestamp"] for d in read_documents([corpus])]
    assert stamps == [JAN_1_2026, JAN_1_2026 + 86_400_000]
    # the ingest bridge maps a live record's field the same way
    mapped = to_document(
        {"id": 3, "text": "x", "SQLDATE": "20260101"}, FieldMapping(timestamp="SQLDATE")
    )
    assert mapped["timestamp"] == JAN_1_2026
