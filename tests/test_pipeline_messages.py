"""Message validation: every malformed input is refused with a reason, good ones parse exactly."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from confluent_kafka import Message
from sparsewatch.consumers.field_mapping import FieldMapping, parse_json_object
from sparsewatch.consumers.ingest import map_record
from sparsewatch.consumers.messages import (
    EndOfStream,
    InvalidMessageError,
    RecordError,
    parse_document,
    parse_message,
)


def test_good_document_with_iso_and_epoch_times():
    a = parse_document(
        json.dumps(
            {
                "id": "1",
                "text": "héllo",
                "timestamp": "1987-03-01T10:00:00Z",
                "stream": "news",
                "labels": ["acq"],
                "meta": {"x": 1},
            }
        ).encode()
    )
    assert (a.id, a.text, a.stream, a.labels, a.meta) == ("1", "héllo", "news", ("acq",), {"x": 1})
    assert a.timestamp_ms == int(datetime(1987, 3, 1, 10, tzinfo=UTC).timestamp() * 1000)
    b = parse_document(json.dumps({"id": "2", "text": "", "timestamp": a.timestamp_ms}).encode())
    assert b.timestamp_ms == a.timestamp_ms and b.stream == "default" and b.labels == ()
    assert parse_document(a.to_json()) == a


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (None, "null value"),
        (b"\xff\xfe garbage", "not UTF-8"),
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"text": "a", "timestamp": 1}', "missing field 'id'"),
        (b'{"id": 5, "text": "a", "timestamp": 1}', "'id' must be a string"),
        (b'{"id": "x", "timestamp": 1}', "missing field 'text'"),
        (b'{"id": "x", "text": 3, "timestamp": 1}', "'text' must be a string"),
        (b'{"id": "x", "text": "a"}', "missing field 'timestamp'"),
        (b'{"id": "x", "text": "a", "timestamp": "yesterday"}', "not ISO-8601"),
        (b'{"id": "x", "text": "a", "timestamp": -5}', "outside"),
        (b'{"id": "x", "text": "a", "timestamp": -0.9}', "outside"),  # int() made it 0
        # a float of it overflowed: OverflowError, a traceback in the log
        (b'{"id": "x", "text": "a", "timestamp": 1' + b"0" * 400 + b"}", "outside 1970..2200"),
        (b'{"id": "x", "text": "a", "timestamp": true}', "timestamp must be"),
        (b'{"id": "x", "text": "a", "timestamp": 1, "stream": ""}', "'stream' is empty"),
        (b'{"id": "x", "text": "a", "timestamp": 1, "labels": "acq"}', "'labels'"),
        (b'{"id": "x", "text": "a", "timestamp": 1, "meta": []}', "'meta'"),
        # JSON escapes that decode to strings with no UTF-8 form, or that PostgreSQL refuses
        (b'{"id": "x", "text": "a\\ud800b", "timestamp": 1}', "'text' contains an unpaired"),
        (b'{"id": "\\udfff", "text": "a", "timestamp": 1}', "'id' contains an unpaired"),
        (b'{"id": "x", "text": "a", "timestamp": 1, "stream": "s\\ud83d"}', "'stream'"),
        (b'{"id": "x", "text": "a", "timestamp": 1, "labels": ["\\udc00"]}', "'labels'"),
        (b'{"id": "x", "text": "a\\u0000b", "timestamp": 1}', "'text' contains a NUL"),
        (b'{"id": "x\\u0000", "text": "a", "timestamp": 1}', "'id' contains a NUL"),
        # inputs on which json.loads raises something other than JSONDecodeError
        (b'{"id": "x", "text": "a", "timestamp": 1' + b"9" * 5000 + b"}", "invalid JSON"),
        (b'{"id": "x", "text": "a", "meta": ' + b"[" * 100_000 + b"}", "nested too deeply"),
    ],
)
def test_bad_messages_have_reasons(payload, reason):
    with pytest.raises(InvalidMessageError, match=reason):
        parse_document(payload)


def test_paired_surrogate_escapes_are_text_not_errors():
    doc = parse_document(b'{"id": "x", "text": "\\ud83d\\ude00 ok", "timestamp": 1}')
    assert doc.text == "\U0001f600 ok" and parse_document(doc.to_json()) == doc


def test_oversized_text_is_refused():
    big = json.dumps({"id": "x", "text": "a" * 2000, "timestamp": 1}).encode()
    with pytest.raises(InvalidMessageError, match="longer than 1000 bytes"):
        parse_document(big, max_text_bytes=1000)


@pytest.mark.parametrize("text", ["\u6771" * 30_000, "\x01" * 90_000], ids=["cjk", "control"])
def test_a_text_within_the_limit_is_accepted_however_its_json_escapes_it(text):
    """90,000 bytes of UTF-8 text is within 100,000 whether the producer writes it raw or as
    "\\uXXXX" escapes (Python's default, 180,051 bytes): the size guard before parsing
    refused the escaped form."""
    for ensure_ascii in (False, True):
        payload = json.dumps({"id": "x", "text": text, "timestamp": 1}, ensure_ascii=ensure_ascii)
        assert parse_document(payload.encode(), max_text_bytes=100_000).text == text


def test_end_of_stream_markers_parse_and_documents_still_do():
    marker = EndOfStream("alpha")
    assert parse_message(marker.to_json()) == marker
    assert parse_message(b'{"end_of_stream": true}') == EndOfStream("default")
    doc = parse_message(b'{"id": "x", "text": "a", "timestamp": 1, "stream": "alpha"}')
    assert doc == parse_document(b'{"id": "x", "text": "a", "timestamp": 1, "stream": "alpha"}')


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b'{"stream": "a", "end_of_stream": false}', "'end_of_stream' must be true"),
        (b'{"stream": "a", "end_of_stream": 1}', "'end_of_stream' must be true"),
        (b'{"stream": 3, "end_of_stream": true}', "'stream' must be a string"),
        (b"[true]", "not a JSON object but list"),
    ],
)
def test_bad_end_of_stream_markers_have_reasons(payload, reason):
    with pytest.raises(InvalidMessageError, match=reason):
        parse_message(payload)


@pytest.mark.parametrize(
    ("fields", "carried"),
    [
        ({"id": "last", "text": "the final article", "timestamp": 1_700_000_000_000},
         "'id', 'text', 'timestamp'"),
        ({"text": "the final article"}, "'text'"),
        ({"labels": ["acq"], "meta": {}}, "'labels', 'meta'"),
    ],
)  # fmt: skip
def test_an_end_of_stream_marker_carrying_document_fields_is_refused(fields, carried):
    """Taken for a bare marker, the document it carries was dropped unseen (neither processed
    nor dead-lettered): it is refused with a reason, as a marker with 'end_of_stream' false."""
    payload = json.dumps({"stream": "news", **fields, "end_of_stream": True}).encode()
    reason = f"an end-of-stream marker carries no document fields: {carried}"
    with pytest.raises(InvalidMessageError) as refused:
        parse_message(payload)
    assert refused.value.reason == reason


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xff\xfe garbage", "not UTF-8 (byte 0 of the message)"),
        (b"{not json", "invalid JSON: Expecting property name enclosed in double quotes "
         "(column 2)"),
        (b'{"a": 1,\n "b": }', "invalid JSON: Expecting value (line 2, column 7)"),
        (b"[1, 2]", "not a JSON object but list"),
        (b'{"a": 1' + b"9" * 5000 + b"}", "invalid JSON: Exceeds the limit (4300 digits) for "
         "integer string conversion: value has 5001 digits"),
        (b"[" * 100_000, "invalid JSON: nested too deeply"),
    ],
)  # fmt: skip
def test_the_workers_the_bridge_and_the_replay_tool_give_one_reason(payload, reason):
    """A payload that is not a JSON object gets the same reason from the detector worker, the
    ingest bridge and the replay tool (one decoder), without Python's advice on its settings."""
    with pytest.raises(InvalidMessageError) as worker:
        parse_document(payload)
    with pytest.raises(RecordError) as bridge:
        map_record(Message(topic="t", partition=0, offset=0, value=payload), FieldMapping())
    with pytest.raises(RecordError) as replay:
        parse_json_object(payload, "message")
    assert worker.value.reason == str(bridge.value) == str(replay.value) == reason
