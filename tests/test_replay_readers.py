"""Corpus readers, no broker: formats, field mapping, malformed files, external sort, pacing."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sparsewatch.consumers.field_mapping import FieldMapping, to_document
from sparsewatch.consumers.messages import (
    MAX_ID_CHARS,
    MAX_STREAM_CHARS,
    InvalidMessageError,
    RecordError,
    encode,
    parse_document,
)
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.replay.documents import ErrorFile, ReadStats, read_documents
from sparsewatch.replay.event_sort import sort_by_event_time
from sparsewatch.replay.producer import Pacer, as_message
from sparsewatch.replay.readers import Rejected

MS_2024 = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp() * 1000)


def _read(paths, tmp_path, mapping=None, fmt=None):
    stats = ReadStats()
    errors_path = tmp_path / "errors.jsonl"
    with ErrorFile(errors_path) as errors:
        docs = list(read_documents(paths, mapping or FieldMapping(), errors, fmt, stats))
    lines = errors_path.read_text().splitlines() if errors_path.exists() else []
    return docs, [json.loads(x) for x in lines], stats


def test_jsonl_plain_and_gzip_give_the_same_documents(tmp_path):
    records = [
        {"id": i, "text": f"text {i}", "timestamp": MS_2024 + i, "stream": f"s{i % 2}", "x": i}
        for i in range(5)
    ]
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    (tmp_path / "a.jsonl").write_bytes(body)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(body))
    (tmp_path / "c.data").write_bytes(gzip.compress(body))  # gzip found by its magic number
    plain, errors, _ = _read([tmp_path / "a.jsonl"], tmp_path)
    zipped, _, _ = _read([tmp_path / "b.jsonl.gz"], tmp_path)
    forced, _, _ = _read([tmp_path / "c.data"], tmp_path, fmt="jsonl")
    assert errors == [] and plain == zipped == forced
    assert plain[3] == {
        "id": "3",
        "text": "text 3",
        "timestamp": MS_2024 + 3,
        "stream": "s1",
        "labels": [],
        "meta": {"x": 3},
    }


def test_csv_with_field_mapping_and_multiline_field(tmp_path):
    path = tmp_path / "docs.csv"
    path.write_text(
        "\ufeffkey,when,channel,headline,story,tags\n"
        '7,2024-01-01T00:00:05Z,wire,Title,"line one\nline two",earn;acq\n'
        "8,1704067200000,,Other,body,\n",
        encoding="utf-8",
    )
    mapping = FieldMapping(
        id="key",
        text=("headline", "story"),
        timestamp="when",
        stream="channel",
        labels="tags",
        default_stream="misc",
    )
    docs, errors, stats = _read([path], tmp_path, mapping)
    assert errors == [] and stats.read == 2
    assert docs[0] == {
        "id": "7",
        "text": "Title\n\nline one\nline two",
        "timestamp": MS_2024 + 5000,
        "stream": "wire",
        "labels": ["earn", "acq"],
        "meta": {},
    }
    assert (
        docs[1]["stream"] == "misc" and docs[1]["labels"] == [] and docs[1]["timestamp"] == MS_2024
    )


def _sgml(stories: list[dict]) -> str:
    parts = ['<!DOCTYPE lewis SYSTEM "lewis.dtd">\n']
    for s in stories:
        topics = "".join(f"<D>{t}</D>" for t in s["topics"])
        parts.append(
            f'<REUTERS TOPICS="YES" LEWISSPLIT="TRAIN" CGISPLIT="TRAINING-SET" OLDID="1" '
            f'NEWID="{s["id"]}">\n<DATE>{s["date"]}</DATE>\n<TOPICS>{topics}</TOPICS>\n'
            f"<PLACES><D>usa</D></PLACES>\n<TEXT>&#2;\n<TITLE>{s['title']}</TITLE>\n"
            f"<DATELINE>    NEW YORK, Feb 26 - </DATELINE><BODY>{s['body']}\n Reuter\n&#3;</BODY>"
            f"</TEXT>\n</REUTERS>\n"
        )
    return "".join(parts)


def test_reuters_sgml(tmp_path):
    stories = [
        {
            "id": 2,
            "date": "26-FEB-1987 15:02:20.00",
            "topics": [],
            "title": "B",
            "body": "x &lt; y",
        },
        {
            "id": 1,
            "date": "26-FEB-1987 15:01:01.79",
            "topics": ["cocoa", "grain"],
            "title": "BAHIA &amp; COCOA",
            "body": "Showers\ncontinued",
        },
    ]
    path = tmp_path / "reut2-000.sgm"
    path.write_bytes(_sgml(stories).encode("latin-1") + b'\n<REUTERS NEWID="3"><DATE>x')
    docs, errors, stats = _read([path], tmp_path)
    assert [d["id"] for d in docs] == ["2", "1"]
    assert docs[1]["text"] == "BAHIA & COCOA\n\nShowers\ncontinued\n Reuter"
    assert docs[0]["text"] == "B\n\nx < y\n Reuter"
    assert docs[1]["labels"] == ["cocoa", "grain"]
    expected = datetime(1987, 2, 26, 15, 1, 1, 790000, tzinfo=UTC).timestamp() * 1000
    assert docs[1]["timestamp"] == round(expected)
    assert docs[1]["meta"]["places"] == ["usa"] and docs[1]["meta"]["lewissplit"] == "TRAIN"
    # The truncated last element is reported with the line where it starts.
    assert stats.rejected == 1 and errors[0]["reason"].startswith("unterminated REUTERS")
    assert errors[0]["line"] == _sgml(stories).count("\n") + 2
    gz = tmp_path / "reut2-001.sgm.gz"
    gz.write_bytes(gzip.compress(_sgml(stories).encode("latin-1")))
    again, _, _ = _read([gz], tmp_path)
    assert again == docs


def test_malformed_jsonl_lines_go_to_the_error_file_with_their_line(tmp_path):
    good = {"id": "g", "text": "ok", "timestamp": "2024-01-01T00:00:00+02:00"}
    lines = [
        json.dumps(good).encode(),  # 1 good
        b'{"id": "x", "text": "t", "timestamp": ',  # 2 invalid JSON
        json.dumps({"text": "no id", "timestamp": 1}).encode(),  # 3 missing id
        json.dumps({"id": "y", "timestamp": 1}).encode(),  # 4 missing text
        json.dumps({"id": "z", "text": "t"}).encode(),  # 5 missing timestamp
        json.dumps({"id": "w", "text": "t", "timestamp": "yesterday"}).encode(),  # 6 bad time
        b'{"id": "v", "text": "caf\xe9", "timestamp": 1}',  # 7 not UTF-8 (Latin-1 byte)
        b"",  # 8 blank: skipped, not an error
        b"[1, 2]",  # 9 not an object
        json.dumps({"id": "u", "text": 5, "timestamp": 1}).encode(),  # 10 text not a string
        json.dumps({"id": "t", "text": "t", "timestamp": 1e30}).encode(),  # 11 out of range
        json.dumps({**good, "id": "g2"}).encode(),  # 12 good
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    docs, errors, stats = _read([path], tmp_path)
    assert [d["id"] for d in docs] == ["g", "g2"]
    assert docs[0]["timestamp"] == MS_2024 - 2 * 3600 * 1000
    assert [e["line"] for e in errors] == [2, 3, 4, 5, 6, 7, 9, 10, 11]
    assert all(e["source"] == str(path) for e in errors)
    reasons = [e["reason"] for e in errors]
    for line, fragment in [
        (2, "invalid JSON"),
        (3, "missing id"),
        (4, "missing text"),
        (5, "missing timestamp"),
        (6, "bad timestamp"),
        (7, "not UTF-8"),
        (9, "not a JSON object"),
        (10, "not a string"),
        (11, "outside 1970..2200"),
    ]:
        assert fragment in reasons[[e["line"] for e in errors].index(line)]
    assert errors[0]["raw"].startswith('{"id": "x"')
    assert stats.read == 11 and stats.rejected == 9


def _detector_accepts(doc: dict) -> bool:
    """Whether the producer can encode ``doc`` and the detector's parser accepts the bytes."""
    parse_document(encode(as_message(doc)))
    return True


def test_records_that_cannot_be_sent_are_rejected_and_the_rest_still_read(tmp_path):
    good = {"id": "g", "text": "ok", "timestamp": MS_2024}
    lines = [
        json.dumps(good).encode(),  # 1 good
        b'{"id": "s", "text": "\\ud800", "timestamp": 1}',  # 2 lone surrogate (JSON escape)
        b'{"id": "d", "text": "t", "timestamp": ' + b"7" * 5000 + b"}",  # 3 5,000 digits
        json.dumps({"id": "e", "text": "t", "timestamp": "7" * 5000}).encode(),  # 4 as a string
        json.dumps({"id": "n", "text": "a\u0000b", "timestamp": 1}).encode(),  # 5 NUL
        # 6 a surrogate in meta: kept (the detector accepts it; it goes out as its JSON escape)
        b'{"id": "m", "text": "t", "timestamp": 1, "k": ["\\udc00"]}',
        b'{"id": "l", "text": "t", "timestamp": 1, "labels": ["\\udbff"]}',  # 7 in a label
        b'{"id": "\\ud800x", "text": "t", "timestamp": 1}',  # 8 in the id
        b"[" * 100_000 + b"]" * 100_000,  # 9 nested too deeply for the parser
        json.dumps({**good, "id": "g2"}).encode(),  # 10 good
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    docs, errors, stats = _read([path], tmp_path)
    assert [d["id"] for d in docs] == ["g", "m", "g2"]
    assert all(_detector_accepts(d) for d in docs)
    assert parse_document(encode(as_message(docs[1]))).meta == {"k": ["\udc00"]}
    assert [e["line"] for e in errors] == [2, 3, 4, 5, 7, 8, 9]
    assert stats.read == 10 and stats.rejected == 7
    reasons = dict((e["line"], e["reason"]) for e in errors)
    assert "field 'text' contains an unpaired surrogate" in reasons[2]
    assert "invalid JSON" in reasons[3] and "5000 digits" in reasons[3] and "sys." not in reasons[3]
    assert "outside 1970..2200" in reasons[4]
    assert "NUL" in reasons[5] and "'labels'" in reasons[7]
    assert "field 'id'" in reasons[8] and "invalid JSON" in reasons[9]
    # The raw record keeps the surrogate, written as its JSON escape.
    assert json.loads(errors[0]["raw"])["text"] == "\ud800"


def _any_text(min_size: int = 0, max_size: int = 5) -> st.SearchStrategy[str]:
    """Text of any code points, surrogates and controls included."""
    alphabet = st.characters(codec=None, exclude_categories=())
    return st.text(alphabet, min_size=min_size, max_size=max_size)


def _short_or_around(limit: int) -> st.SearchStrategy[str]:
    """A short string, or one within two characters of ``limit``."""
    return st.one_of(_any_text(), _any_text(limit - 2, limit + 2))


def _detector_accepts_as_sent(doc: dict, max_text_bytes: int) -> bool:
    """Whether the detector accepts ``doc`` sent as it is (a blank stream meaning the default)."""
    stream = doc["stream"] if doc["stream"].strip() else "default"
    try:
        payload = json.dumps({**doc, "stream": stream}, ensure_ascii=False).encode()
        parse_document(payload, max_text_bytes)
    except (UnicodeEncodeError, InvalidMessageError):
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    _short_or_around(MAX_ID_CHARS),
    _any_text(max_size=40),
    _short_or_around(MAX_STREAM_CHARS),
    st.one_of(st.integers(1, 100), st.integers(1000, 200_000)),  # the text's, or an id's, limit
)
def test_a_read_document_is_one_the_detector_accepts(doc_id, text, stream, max_text_bytes):
    doc = {"id": doc_id, "text": text, "timestamp": MS_2024, "stream": stream, "labels": [text]}
    try:
        message = as_message(doc, max_text_bytes)
    except RecordError:
        assert not _detector_accepts_as_sent(doc, max_text_bytes)
        return
    parse_document(encode(message), max_text_bytes)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"id": "i" * (MAX_ID_CHARS + 1)}, f"field 'id' is longer than {MAX_ID_CHARS} characters"),
        (
            {"stream": "s" * (MAX_STREAM_CHARS + 1)},
            f"field 'stream' is longer than {MAX_STREAM_CHARS} characters",
        ),
        ({"text": "\u00e9" * 51}, "text longer than 100 bytes"),  # 51 characters, 102 bytes
        ({"source_note": "m" * 65_000}, "exceeds the size limit"),  # 6 x 100 + 64,000
    ],
    ids=["long-id", "long-stream", "long-text", "huge-message"],
)
def test_records_the_detector_would_dead_letter_are_rejected_with_their_line(
    tmp_path, change, reason
):
    base = {"id": "a", "text": "t", "timestamp": MS_2024, "stream": "s"}
    at_the_limits = {
        "id": "i" * MAX_ID_CHARS,
        "text": "\u00e9" * 50,
        "timestamp": MS_2024,
        "stream": "s" * MAX_STREAM_CHARS,
    }
    rows = [base, {**base, "id": "b", **change}, at_the_limits]
    path = tmp_path / "limits.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    stats = ReadStats()
    with ErrorFile(tmp_path / "errors.jsonl") as errors:
        docs = list(read_documents([path], errors=errors, stats=stats, max_text_bytes=100))
    assert [d["id"] for d in docs] == ["a", "i" * MAX_ID_CHARS]
    entries = [json.loads(x) for x in (tmp_path / "errors.jsonl").read_text().splitlines()]
    assert [(e["source"], e["line"]) for e in entries] == [(str(path), 2)]
    assert reason in entries[0]["reason"] and stats.rejected == 1
    assert all(parse_document(encode(as_message(d, 100)), 100) for d in docs)


def test_reuters_character_references_that_are_no_characters_reject_the_story(tmp_path):
    story = {"date": "26-FEB-1987 15:02:20.00", "topics": [], "title": "T"}
    stories = [
        {**story, "id": 1, "body": "fine &#38; dandy"},
        {**story, "id": 2, "body": "x &#99999999; y"},
        {**story, "id": 3, "body": "x &#" + "9" * 5000 + "; y"},
        {**story, "id": 4, "body": "x &#55296; y"},  # a surrogate code point
        {**story, "id": 5, "body": "also fine &#00065;"},
    ]
    path = tmp_path / "reut2-000.sgm"
    path.write_bytes(_sgml(stories).encode("latin-1"))
    docs, errors, stats = _read([path], tmp_path)
    assert [d["id"] for d in docs] == ["1", "5"]
    assert docs[0]["text"].startswith("T\n\nfine & dandy") and "also fine A" in docs[1]["text"]
    assert all(_detector_accepts(d) for d in docs)
    assert stats.rejected == 3
    assert "&#99999999;: not a Unicode character" in errors[0]["reason"]
    assert "not a Unicode character" in errors[1]["reason"]
    assert "unpaired surrogate" in errors[2]["reason"]
    text = _sgml(stories)
    starts = [i for i in range(len(text)) if text.startswith("<REUTERS", i)]
    assert [e["line"] for e in errors] == [text.count("\n", 0, i) + 1 for i in starts[1:4]]


def test_truncated_gzip_keeps_the_good_records_and_reports_the_cut(tmp_path):
    records = [{"id": i, "text": "word " * 50, "timestamp": MS_2024 + i} for i in range(2000)]
    blob = gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(blob[: len(blob) // 2])
    docs, errors, stats = _read([path], tmp_path)
    assert 0 < len(docs) < 2000
    assert [d["id"] for d in docs] == [str(i) for i in range(len(docs))]
    assert errors[-1]["reason"].startswith("truncated gzip")
    assert errors[-1]["line"] == len(docs) + len(errors)
    assert stats.rejected == len(errors) >= 1


def test_bad_csv_rows_and_unreadable_files(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(
        b"id,text,timestamp\n1,ok,2024-01-01\n2,too,many,fields\n3,\xff\xfe,2024-01-01\n"
        b"4,fine,2024-01-02\n"
    )
    docs, errors, _ = _read([path, tmp_path / "missing.csv"], tmp_path)
    assert [d["id"] for d in docs] == ["1", "4"]
    assert [(e["line"], e["reason"].split(" ")[0]) for e in errors] == [
        (3, "4"),
        (4, "not"),
        (0, "cannot"),
    ]


@pytest.mark.parametrize(
    ("record", "bad_line"),
    [
        (b'1,"first line\n\xe9t\xe9 (Latin-1)\nlast line",2024-01-01\n', 3),
        (b'1,"first line\nclosing line caf\xe9",2024-01-01\n', 3),
        (b'1,"caf\xe9 opening line\nlast line",2024-01-01\n', 2),
    ],
    ids=["middle-line", "closing-quote-line", "opening-line"],
)
def test_a_csv_record_with_a_line_that_is_not_utf8_is_rejected_whole(tmp_path, record, bad_line):
    later = b'2,second,2024-01-02\n3,"third\nrecord",2024-01-03\n4,x,2024-01-04\n'
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"id,text,timestamp\n" + record + later)
    docs, errors, stats = _read([path], tmp_path)
    assert [(d["id"], d["text"]) for d in docs] == [
        ("2", "second"),
        ("3", "third\nrecord"),
        ("4", "x"),
    ]
    assert [e["line"] for e in errors] == [2]
    assert f"not UTF-8 (line {bad_line}, byte " in errors[0]["reason"]
    assert errors[0]["raw"] == record.decode("utf-8", "backslashreplace").rstrip("\n")
    assert (stats.read, stats.rejected) == (4, 1)


def test_a_csv_record_the_file_ends_inside_is_rejected_not_cut_short(tmp_path):
    def text(i: int) -> str:
        return f"line one of {i} " + "w" * 150 + f"\nline two of {i} " + "v" * 150

    body = "id,timestamp,text\n" + "".join(f'{i},2024-01-01,"{text(i)}"\n' for i in range(400))
    unclosed = tmp_path / "unclosed.csv"  # a closing quote missing: the rest is one field
    tail = "398,2024-01-02,plain\n399,2024-01-03,plain\n"
    unclosed.write_text(body.split("397,")[0] + f'397,2024-01-01,"{text(397)}\n' + tail)
    docs, errors, _ = _read([unclosed], tmp_path)
    assert [d["id"] for d in docs] == [str(i) for i in range(397)]
    assert [e["line"] for e in errors] == [2 + 2 * 397]
    assert "the file ends inside a quoted field" in errors[0]["reason"]
    assert errors[0]["raw"] == f'397,2024-01-01,"{text(397)}\n' + tail.rstrip("\n")
    cut = tmp_path / "cut.csv.gz"  # a gzip cut off between the two lines of a record
    blob = gzip.compress(body.encode(), mtime=0)
    cut.write_bytes(blob[: len(blob) * 2 // 3])
    docs, errors, _ = _read([cut], tmp_path)
    assert [d["text"] for d in docs] == [text(i) for i in range(len(docs))]
    assert errors[-1]["reason"].startswith("truncated gzip")
    assert [e["line"] for e in errors[:-1]] == [2 + 2 * len(docs)]
    assert "the file ends inside a quoted field" in errors[0]["reason"]
    assert errors[0]["raw"] == f'{len(docs)},2024-01-01,"{text(len(docs)).splitlines()[0]}'


def test_a_csv_header_that_is_not_utf8_rejects_every_record(tmp_path):
    path = tmp_path / "latin1-header.csv"
    path.write_bytes(b'id,t\xe9xt,timestamp\n1,a,2024-01-01\n2,"b\nc",2024-01-02\n')
    docs, errors, stats = _read([path], tmp_path)
    assert docs == [] and [e["line"] for e in errors] == [1, 2, 3]
    assert "not UTF-8" in errors[0]["reason"]
    assert all("header row (line 1) rejected: not UTF-8" in e["reason"] for e in errors[1:])
    assert [e["raw"] for e in errors[1:]] == ["1,a,2024-01-01", '2,"b\nc",2024-01-02']
    assert (stats.read, stats.rejected) == (3, 3)


def test_an_error_file_replaces_its_path_only_when_closed_normally(tmp_path):
    path = tmp_path / "errors.jsonl"
    path.write_text("earlier run\n")
    with pytest.raises(RuntimeError), ErrorFile(path) as errors:
        errors.write(Rejected("a.csv", 2, "bad"))
        assert path.read_text() == "earlier run\n"
        raise RuntimeError("crash while reading")
    assert path.read_text() == "earlier run\n" and list(tmp_path.iterdir()) == [path]
    with ErrorFile(path) as errors:
        errors.write(Rejected("a.csv", 2, "bad", "raw"))
        assert path.read_text() == "earlier run\n"
    entries = [json.loads(x) for x in path.read_text().splitlines()]
    assert entries == [{"source": "a.csv", "line": 2, "reason": "bad", "raw": "raw"}]
    assert list(tmp_path.iterdir()) == [path]


def test_unknown_extension_is_a_clear_error(tmp_path):
    (tmp_path / "x.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match="cannot tell the format"):
        _read([tmp_path / "x.parquet"], tmp_path)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1_700_000_000_000, 1_700_000_000_000),
        ("1700000000000", 1_700_000_000_000),
        ("2024-01-01T00:00:00Z", MS_2024),
        ("2024-01-01 01:00:00+01:00", MS_2024),
        ("2024-01-01", MS_2024),
        ("01-JAN-2024 00:00:00.50", MS_2024 + 500),
        ("Mon Jan 01 00:00:00 +0000 2024", MS_2024),  # a tweet's created_at
        ("Mon Jan 01 02:00:00 +0200 2024", MS_2024),
        ("Mon, 01 Jan 2024 00:00:00 GMT", MS_2024),  # RFC 2822 (mail, RSS)
        ("Sun, 31 Dec 2023 19:00:00 -0500", MS_2024),
    ],
)
def test_timestamps(value, expected):
    assert parse_timestamp_ms(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1_704_067_200, MS_2024),
        (1_704_067_200.999, MS_2024 + 999),  # x 1000 in floats is ...998.9998: not cut to 998
        ("1704067200.999", MS_2024 + 999),
        ("1704067200.9999", MS_2024 + 999),  # a fraction of a millisecond is cut off
        ("2024-01-01T00:00:00Z", MS_2024),  # text dates are not numbers: unchanged
        ("01-JAN-2024 00:00:00.50", MS_2024 + 500),
    ],
)
def test_timestamps_in_epoch_seconds(value, expected):
    assert parse_timestamp_ms(value, unit_ms=1000) == expected


@pytest.mark.parametrize("value", [float("inf"), "1e400", 10**13, "-1", "nan"])
def test_bad_timestamps_in_epoch_seconds(value):
    with pytest.raises(RecordError):
        parse_timestamp_ms(value, unit_ms=1000)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        "soon",
        float("nan"),
        -5,
        [1],
        "32-JAN-2024 00:00:00",
        "Mon, 30 Feb 2024 00:00:00 GMT",
        "Mon Jan 01 00:00:00 +0000 1960",  # before 1970
        pytest.param("9" * 5000, id="5000-digit-string"),
        pytest.param(10**5000, id="5001-digit-int"),
    ],
)
def test_bad_timestamps(value):
    with pytest.raises(RecordError):
        parse_timestamp_ms(value)


def test_dotted_field_names_read_nested_objects(tmp_path):
    """A tweet's fields as Twitter writes them: the stream in ``user.lang``, the long text in
    ``extended_tweet.full_text``; a top-level field named with a dot wins over the path."""
    tweet = {
        "id_str": "17",
        "extended_tweet": {"full_text": "the long text"},
        "created_at": "Mon Jan 01 00:00:00 +0000 2024",
        "user": {"lang": "en", "id": 5},
        "a.b": "top",
        "a": {"b": "nested"},
    }
    path = tmp_path / "tweets.jsonl"
    path.write_text(json.dumps(tweet) + "\n" + json.dumps({**tweet, "user": "plain"}) + "\n")
    mapping = FieldMapping(
        id="id_str", text=("extended_tweet.full_text",), stream="user.lang", labels="a.b"
    )
    docs, errors, _ = _read([path], tmp_path, mapping)
    assert [(d["id"], d["text"], d["stream"], d["timestamp"]) for d in docs] == [
        ("17", "the long text", "en", MS_2024),
        ("17", "the long text", "default", MS_2024),  # no user.lang: the default stream
    ]
    assert docs[0]["labels"] == ["top"] and docs[0]["meta"]["user"] == {"id": 5}  # lang used
    assert "extended_tweet" not in docs[0]["meta"]  # emptied by the text taken out of it
    assert errors == []
    with pytest.raises(RecordError, match=r"missing text field 'extended_tweet\.text'"):
        to_document(tweet, FieldMapping(id="id_str", text=("extended_tweet.text",)))


def test_a_text_field_with_alternatives_takes_the_first_present():
    """Twitter's streaming JSON: a long tweet's whole text in ``extended_tweet.full_text``, a
    short one's in ``text`` only."""
    spec = FieldMapping(id="id_str", text=("extended_tweet.full_text|text",))
    short = {"id_str": "1", "text": "short", "created_at": "2024-01-01"}
    long = {**short, "id_str": "2", "text": "cut…", "extended_tweet": {"full_text": "whole"}}
    assert to_document(short, spec)["text"] == "short"
    assert to_document(long, spec)["text"] == "whole"
    assert "text" not in to_document(long, spec)["meta"]  # a field read for the text
    with pytest.raises(RecordError, match=r"missing text field 'extended_tweet\.full_text\|text'"):
        to_document({"id_str": "3", "created_at": "2024-01-01"}, spec)
    both = FieldMapping(id="id_str", text=("title", "extended_tweet.full_text|text"))
    assert to_document({**long, "title": "T"}, both)["text"] == "T\n\nwhole"


def test_message_normalisation_folds_extra_keys_into_meta():
    doc = {"id": 1, "text": "t", "timestamp": "2024-01-01T00:00:00Z", "labels": ["a"], "k": 2}
    assert as_message({**doc, "meta": {"m": 1}}) == {
        "id": "1",
        "text": "t",
        "timestamp": MS_2024,
        "stream": "default",
        "labels": ["a"],
        "meta": {"k": 2, "m": 1},
    }
    assert as_message(as_message(doc)) == as_message(doc)
    with pytest.raises(RecordError, match="meta"):
        as_message({**doc, "meta": [1]})
    with pytest.raises(RecordError, match="labels"):
        to_document({**doc, "labels": {"a": 1}})


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=300), st.integers(1, 40))
def test_external_sort_is_a_stable_sort_by_timestamp(timestamps, chunk_size):
    docs = [{"id": str(i), "timestamp": ts} for i, ts in enumerate(timestamps)]
    expected = sorted(docs, key=lambda d: d["timestamp"])  # Python's sort is stable
    assert list(sort_by_event_time(iter(docs), chunk_size=chunk_size)) == expected


def test_reuters_corpus_reads_completely_and_sorts(shared_data, tmp_path):
    docs, errors, stats = _read([shared_data / "reuters21578.jsonl.gz"], tmp_path)
    assert errors == [] and stats.read == len(docs) == 21578
    ordered = list(sort_by_event_time(docs, chunk_size=4000, tmp_dir=tmp_path))
    assert [d["timestamp"] for d in ordered] == sorted(d["timestamp"] for d in docs)
    assert sorted(d["id"] for d in ordered) == sorted(str(i) for i in range(1, 21579))
    assert sum(1 for d in docs if d["labels"]) == 11367


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pacer_rate_and_speedup():
    clock = FakeClock()
    pacer = Pacer(rate=4.0, clock=clock)
    assert [pacer.delay(0) for _ in range(3)] == [0.0, 0.25, 0.5]
    clock = FakeClock()
    pacer = Pacer(speedup=60.0, max_wait_s=2.0, clock=clock)
    assert pacer.delay(0) == 0.0
    assert pacer.delay(60_000) == pytest.approx(1.0)  # one event minute = one second
    clock.now += 1.0
    assert pacer.delay(3_600_000) == pytest.approx(2.0)  # an event hour capped at 2 s
    clock.now += 2.0
    assert pacer.delay(3_660_000) == pytest.approx(1.0)  # later gaps keep their scale
    assert Pacer().delay(123) == 0.0
    with pytest.raises(ValueError):
        Pacer(rate=1.0, speedup=2.0)
