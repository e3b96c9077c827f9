"""Replay readers and zone names: an ISO-8601 date followed by a zone name (``2026-11-28 12:00:00
UTC``, as BigQuery writes timestamps in its exports; Go's ``time.Time`` text ``... +0000 UTC``)
was refused as "not ISO-8601 or epoch ms"; it is read with its zone, as a Reuters date's is, and a
zone it cannot read (``CET``, ``PST``) still rejects the record instead of being read as UTC."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparsewatch.consumers.messages import RecordError
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.replay.documents import ErrorFile, read_documents

NOON = 1_795_867_200_000  # 2026-11-28 12:00:00 UTC
HOUR = 3_600_000


@pytest.mark.parametrize(
    ("value", "expected_ms"),
    [
        ("2026-11-28 12:00:00 UTC", NOON),  # BigQuery
        ("2026-11-28 12:00:00.123456 UTC", NOON + 123),
        ("2026-11-28T12:00:00 GMT", NOON),
        ("2026-11-28T12:00:00UTC", NOON),
        ("2026-11-28 12:00:00 utc", NOON),
        ("2026-11-28 12:00:00 UT", NOON),
        ("2026-11-28 12:00:00.123456789 +0000 UTC", NOON + 123),  # Go's time.Time.String()
        ("2026-11-28 07:00:00 -0500 EST", NOON),
        ("2026-11-28 13:00:00 UTC+01:00", NOON),
        ("2026-11-28 13:00:00 GMT+0100", NOON),
        ("2026-11-28 13:00 GMT+1", NOON),
        ("2026-11-28 UTC", NOON - 12 * HOUR),
    ],
)
def test_an_iso_date_with_a_zone_name_is_read_with_its_zone(value, expected_ms) -> None:
    assert parse_timestamp_ms(value) == expected_ms


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        # never read as UTC: the zone is not one the replay knows the offset of
        ("2026-11-28 12:00:00 CET", "time zone 'CET': give +HHMM"),
        ("2026-11-28 12:00:00 PST", "time zone 'PST': give +HHMM"),
        ("2026-11-28 12:00:00 UTC+25", "time zone offset of a day or more"),
        ("2026-13-28 12:00:00 UTC", "not ISO-8601"),
    ],
)
def test_an_iso_date_with_an_unknown_zone_is_refused_naming_the_zone(value, reason) -> None:
    with pytest.raises(RecordError, match=reason.replace("+", r"\+")):
        parse_timestamp_ms(value)


def test_naive_iso_dates_stay_utc() -> None:
    assert parse_timestamp_ms("2026-11-28 12:00:00") == NOON
    assert parse_timestamp_ms("2026-11-28T12:00:00") == NOON


def test_a_bigquery_csv_export_is_replayed(tmp_path: Path) -> None:
    corpus = tmp_path / "export.csv"
    corpus.write_text(
        "id,text,timestamp\n"
        "a,first story,2026-11-28 12:00:00 UTC\n"
        "b,second story,2026-11-28 12:00:01.5 UTC\n"
        "c,third story,2026-11-28 12:00:00 CET\n",
        encoding="utf-8",
    )
    errors_path = tmp_path / "errors.jsonl"
    with ErrorFile(errors_path) as errors:
        docs = list(read_documents([corpus], errors=errors))
    assert [(d["id"], d["timestamp"]) for d in docs] == [("a", NOON), ("b", NOON + 1500)]
    (rejected,) = [json.loads(line) for line in errors_path.read_text().splitlines()]
    assert rejected["line"] == 4 and "time zone 'CET'" in rejected["reason"]
