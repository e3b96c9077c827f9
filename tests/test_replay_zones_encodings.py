"""Replay readers, third round: zone suffixes of mail dates honoured or refused (they were read as
UTC), NaN and infinite numbers of ``meta`` written as null (the message was not JSON), files with
CR line ends (classic Mac OS) and UTF-16/UTF-32 text with a byte-order mark read line by line
(each was rejected whole or line by line), Reuters SGML in UTF-8 without mojibake, and a document
dated further ahead than the detector's ``windows.max_ahead`` rejected by the replay (it reported
it produced, and the detector dead-lettered it)."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Message
from sparsewatch.consumers.detector_worker import DetectorProcessor
from sparsewatch.consumers.field_mapping import FieldMapping
from sparsewatch.consumers.ingest import map_record
from sparsewatch.consumers.messages import RecordError, encode, parse_document
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.replay.documents import ErrorFile, ReadStats, read_documents
from sparsewatch.replay.producer import as_message
from sparsewatch.replay.readers import Rejected, SourceRecord, read_records

from sparsewatch.config import Config, WindowConfig
from tests.support.cli import run_replay
from tests.support.kafka_topics import consume_values

UTC_2018 = 1_539_202_764_000  # Wed, 10 Oct 2018 20:19:24 UTC
REUTERS_1987 = 541_350_061_790  # 26-FEB-1987 15:01:01.79 UTC
HOUR = 3_600_000


@pytest.mark.parametrize(
    ("value", "expected_ms"),
    [
        # each was read as UTC: parsedate_tz knows one word of zone, and no "GMT+0100"
        ("Wed, 10 Oct 2018 20:19:24 GMT+0100", UTC_2018 - HOUR),
        ("Wed Oct 10 2018 20:19:24 GMT+0100 (Central European Summer Time)", UTC_2018 - HOUR),
        ("Wed, 10 Oct 2018 20:19:24 GMT+1", UTC_2018 - HOUR),
        ("Wed, 10 Oct 2018 20:19:24 UTC-05", UTC_2018 + 5 * HOUR),
        ("Wed, 10 Oct 2018 20:19:24 UTC+05:30", UTC_2018 - 5 * HOUR - HOUR // 2),
        ("Wed, 10 Oct 2018 20:19:24 GMT -0500", UTC_2018 + 5 * HOUR),
        ("Wed Oct 10 20:19:24 GMT+1 2018", UTC_2018 - HOUR),
        ("Wed, 10 Oct 2018 20:19:24 +01", UTC_2018 - HOUR),  # was one minute
        # read right before, and still
        ("Wed, 10 Oct 2018 20:19:24 +0100 (CET)", UTC_2018 - HOUR),
        ("Wed, 10 Oct 2018 20:19:24 -0500 EST", UTC_2018 + 5 * HOUR),
        ("Wed, 10 Oct 2018 20:19:24 EST", UTC_2018 + 5 * HOUR),
        ("Wed, 10 Oct 2018 20:19:24 -0000", UTC_2018),
        ("Wed, 10 Oct 2018 20:19:24 GMT (+0100)", UTC_2018),  # a comment, not a zone
        ("Wednesday, 10-Oct-18 20:19:24 GMT", UTC_2018),
        ("Wed Oct 10 20:19:24 +0000 2018", UTC_2018),
        ("Wed, 10 Oct 2018 20:19:24", UTC_2018),
        # Reuters-style dates: these were refused ("give +HHMM")
        ("26-FEB-1987 15:01:01.79 GMT+1", REUTERS_1987 - HOUR),
        ("26-FEB-1987 15:01:01.79 UTC-05", REUTERS_1987 + 5 * HOUR),
        ("26-FEB-1987 15:01:01.79 GMT +0100", REUTERS_1987 - HOUR),
        ("26-FEB-1987 15:01:01.79 +01", REUTERS_1987 - HOUR),
    ],
)
def test_zone_suffixes_are_honoured(value, expected_ms) -> None:
    assert parse_timestamp_ms(value) == expected_ms


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        # a second year was a zone of +20:18
        ("Wed, 10 Oct 2018 20:19:24 2018", "unknown time zone '2018'"),
        ("Wed, 10 Oct 2018 20:19:24 +100", "unknown time zone '+100'"),
        ("Wed, 10 Oct 2018 20:19:24 GMT+1CET", "unknown time zone 'GMT+1CET'"),
        ("Wed, 10 Oct 2018 20:19:24 PST8PDT", "unknown time zone 'PST8PDT'"),
        ("Wed, 10 Oct 2018 20:19:24 CET", "unknown time zone 'CET'"),
        ("Wed, 10 Oct 2018 20:19:24 GMT+25", "time zone offset of a day or more"),
        ("Wed, 10 Oct 2018 20:19:24 +0160", "time zone offset '+0160'"),
        ("26-FEB-1987 15:01:01.79 EST", "time zone 'EST': give +HHMM"),
    ],
)
def test_unreadable_zone_suffixes_are_refused(value, reason) -> None:
    with pytest.raises(RecordError, match=reason.replace("+", r"\+")):
        parse_timestamp_ms(value)


def _strict(payload: bytes) -> dict:
    """``payload`` parsed as strict JSON (``NaN``, ``Infinity`` refused)."""

    def refuse(token: str) -> None:
        raise ValueError(f"not JSON: {token}")

    return json.loads(payload, parse_constant=refuse)


def test_non_finite_meta_numbers_become_null(tmp_path) -> None:
    path = tmp_path / "nan.jsonl"
    path.write_text(
        '{"id": "a", "text": "t", "timestamp": 0, "x": NaN, "y": 1e400, "z": [-Infinity, 1.5]}\n'
        '{"id": "b", "text": "u", "timestamp": 1, "extra": {"deep": {"v": NaN}}, "w": 2}\n'
    )
    docs = list(read_documents([path]))
    assert [d["id"] for d in docs] == ["a", "b"]
    values = [_strict(encode(as_message(doc))) for doc in docs]
    assert values[0]["meta"] == {"x": None, "y": None, "z": [None, 1.5]}
    assert values[1]["meta"] == {"extra": {"deep": {"v": None}}, "w": 2}
    direct = as_message({"id": "c", "text": "t", "timestamp": 0, "meta": {"k": float("nan")}})
    assert _strict(encode(direct))["meta"] == {"k": None}
    # the ingest bridge maps the same way
    record = b'{"id": "d", "text": "t", "timestamp": 0, "score": NaN}'
    _, value = map_record(Message(topic="s", partition=0, offset=0, value=record), FieldMapping())
    assert _strict(value)["meta"] == {"score": None}
    assert parse_document(value).meta == {"score": None}


def _records(path: Path) -> list[SourceRecord | Rejected]:
    return list(read_records(path))


@pytest.mark.parametrize("zipped", [False, True])
def test_files_with_cr_line_ends_are_read_line_by_line(tmp_path, zipped) -> None:
    jsonl = b'{"id": "a", "text": "t", "timestamp": 0}\r{"id": "b", "text": "u", "timestamp": 1}\r'
    csv = b'id,text,timestamp\ra,t,0\rb,"two\rlines",1\rc,"x""y",2'
    paths = []
    for name, data in (("mac.jsonl", jsonl), ("mac.csv", csv)):
        path = tmp_path / (name + (".gz" if zipped else ""))
        path.write_bytes(gzip.compress(data) if zipped else data)
        paths.append(path)
    jsonl_records, csv_records = _records(paths[0]), _records(paths[1])
    assert all(isinstance(r, SourceRecord) for r in jsonl_records + csv_records)
    assert [(r.line, r.fields["id"]) for r in jsonl_records] == [(1, "a"), (2, "b")]
    assert [(r.line, r.fields["text"]) for r in csv_records] == [
        (2, "t"),
        (3, "two\rlines"),
        (5, 'x"y'),
    ]


def test_a_long_cr_file_is_split_across_reads(tmp_path) -> None:
    line = '{"id": "%d", "text": "' + "word " * 300 + '", "timestamp": %d}\r'
    path = tmp_path / "long.jsonl"
    path.write_text("".join(line % (i, i) for i in range(3000)), newline="")
    assert path.stat().st_size > 3 << 20  # past the sniffed start and many reads
    records = _records(path)
    assert all(isinstance(r, SourceRecord) for r in records)
    assert [r.fields["id"] for r in records] == [str(i) for i in range(3000)]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_with_a_byte_order_mark_are_read(tmp_path, encoding) -> None:
    bom = {"utf-16-be": "\ufeff"}.get(encoding, "")  # utf-16 and utf-32 write their own
    jsonl = tmp_path / "wide.jsonl"
    jsonl.write_bytes(
        (
            bom + '{"id": "a", "text": "café", "timestamp": 0}\r\n{"id": "b", "text": "ü", '
            '"timestamp": 1}\r\n'
        ).encode(encoding)
    )
    csv = tmp_path / "wide.csv"
    csv.write_bytes((bom + 'id,text,timestamp\na,"two\nlines 😀",0\n').encode(encoding))
    jsonl_records, csv_records = _records(jsonl), _records(csv)
    assert [r.fields["text"] for r in jsonl_records] == ["café", "ü"]  # type: ignore[union-attr]
    assert [(r.line, r.fields["text"]) for r in csv_records] == [(2, "two\nlines 😀")]  # type: ignore[union-attr]


def test_utf16_that_ends_inside_a_character_keeps_the_lines_before(tmp_path) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_bytes('{"id": "a", "text": "t", "timestamp": 0}\n'.encode("utf-16") + b"{")
    records = _records(path)
    assert isinstance(records[0], SourceRecord) and records[0].fields["id"] == "a"
    assert isinstance(records[1], Rejected) and records[1].line == 2
    assert "not UTF-16" in records[1].reason and "stopped after line 1" in records[1].reason


def test_reuters_sgml_in_utf8_keeps_its_accents(tmp_path) -> None:
    story = (
        '<REUTERS NEWID="{id}"><DATE>26-FEB-1987 15:01:01.79</DATE><TEXT><TITLE>{title}</TITLE>'
        "<BODY>body</BODY></TEXT></REUTERS>\n"
    )
    path = tmp_path / "reut2-utf8.sgm"
    path.write_bytes(
        story.format(id=1, title="Café").encode("utf-8")
        + story.format(id=2, title="naïve").encode("latin-1")  # a stray byte stays Latin-1
    )
    titles = [r.fields["title"] for r in _records(path)]  # type: ignore[union-attr]
    assert titles == ["Café", "naïve"]  # the first was "CafÃ©"


@pytest.mark.parametrize(
    ("windows", "expected"),
    [
        (WindowConfig(), 86_400_000),
        (WindowConfig(max_ahead="2h"), 7_200_000),
        (WindowConfig(max_ahead=" OFF "), None),
        (WindowConfig(count=50), None),
    ],
)
def test_the_replay_reads_max_ahead_as_the_detector_does(windows, expected) -> None:
    """One rule (``WindowConfig.max_ahead_ms``) for the replay and the detector's parser."""
    config = Config(windows=windows)
    assert config.windows.max_ahead_ms() == expected
    assert DetectorProcessor(config).max_ahead_ms == expected


@pytest.mark.kafka
def test_a_document_dated_past_max_ahead_is_rejected_by_the_replay(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    now = int(time.time() * 1000)
    corpus = tmp_path / "future.jsonl"
    docs = [
        {"id": "past", "text": "t", "timestamp": now - HOUR},
        {"id": "soon", "text": "t", "timestamp": now + HOUR},  # within the default 1d
        {"id": "future", "text": "t", "timestamp": now + 3 * 24 * HOUR},
    ]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    errors = tmp_path / "errors.jsonl"
    code, out, err = run_replay(
        monkeypatch, capsys, topic_name, kafka_bootstrap, str(corpus), "--errors", str(errors),
        "--json",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert summary["produced"] == 2 and summary["rejected"] == 1 and summary["resume_skip"] == 3
    assert [v["id"] for v in consume_values(kafka_bootstrap, topic_name)] == ["past", "soon"]
    (entry,) = [json.loads(line) for line in errors.read_text().splitlines()]
    assert entry["raw"] == "future" and "windows.max_ahead" in entry["reason"]
    # with the check off in the configuration, it is produced
    monkeypatch.setenv("SPARSEWATCH_WINDOWS_MAX_AHEAD", "off")
    code, out, err = run_replay(
        monkeypatch, capsys, topic_name, kafka_bootstrap, str(corpus), "--json", "--errors",
        str(errors),
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["produced"] == 3


def test_read_stats_still_count_every_record(tmp_path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b'{"id": "a", "text": "t", "timestamp": 0}\r{"id": "b"}\r')
    stats = ReadStats()
    with ErrorFile(tmp_path / "e.jsonl") as errors:
        docs = list(read_documents([path], errors=errors, stats=stats))
    assert [d["id"] for d in docs] == ["a"]
    assert (stats.read, stats.rejected) == (2, 1)
