"""An unpaired UTF-16 surrogate in ``meta``: a tweet whose emoji a character-count truncation cut
in half (``"\\ud83d"`` in a JSON corpus line). The detector accepts it (it does not read
``meta``), so the replay sends the document, the surrogate written as the JSON escape it came
from; the replay rejected the whole document. One in the text, which the detector refuses, is
still rejected."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition
from sparsewatch.consumers.field_mapping import FieldMapping
from sparsewatch.consumers.ingest import map_record
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.messages import (
    InvalidMessageError,
    RecordError,
    encode,
    parse_message,
)
from sparsewatch.replay.documents import ErrorFile, read_documents
from sparsewatch.replay.event_sort import sort_by_event_time
from sparsewatch.replay.producer import as_message, replay_documents

MS = int(datetime(2024, 6, 1, tzinfo=UTC).timestamp() * 1000)
CUT = "\ud83d"  # the first half of U+1F600, its second half cut off


def _old_encoding(message: dict) -> bytes:
    """A message's bytes as the replay wrote them before (for one without a surrogate)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _values(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> list[bytes]:
    """The first ``count`` message values of one-partition ``topic``, as they are."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}", "log_level": 3}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        for _ in range(int(timeout)):
            if len(values) >= count:
                break
            values += [m.value() for m in consumer.consume(count, 1.0) if m.error() is None]
        return values
    finally:
        consumer.close()


def test_encode_writes_an_unpaired_surrogate_as_the_escape_the_detector_reads_back():
    meta = {"full_text": f"so happy {CUT}", f"k{CUT}": [CUT, {"deep": "\udc00"}]}
    message = {"id": "m", "text": "t", "timestamp": MS, "stream": "s", "labels": [], "meta": meta}
    value = encode(message)
    assert b'"so happy \\ud83d"' in value  # UTF-8 bytes, the surrogate as its JSON escape
    doc = parse_message(value)
    assert doc.meta == meta and value == doc.to_json()
    plain = {**message, "meta": {"emoji": "\U0001f600", "accent": "\u00e9"}}
    assert encode(plain) == _old_encoding(plain)


def test_the_event_time_sort_keeps_unpaired_surrogates_in_its_run_files(tmp_path):
    """Spilled runs read back exactly: also a high half followed by a low one, two characters
    that a JSON escape would have read back as one (``\\ud83d\\ude00`` is U+1F600)."""
    values = [CUT, "\ud83d\ude00", "\udc00x", "plain"]
    docs = [{"id": str(i), "timestamp": MS - i, "meta": {"v": v}} for i, v in enumerate(values)]
    assert list(sort_by_event_time(docs, chunk_size=1, tmp_dir=tmp_path)) == docs[::-1]


def test_reuters_stories_cut_in_meta_are_kept_and_in_the_text_rejected(tmp_path):
    """A character reference to a surrogate (``&#55357;``) in the dateline, which goes to
    ``meta``, keeps the story; in the title or body, the text, it rejects it as before."""
    story = (
        '<REUTERS NEWID="{id}">\n<DATE>26-FEB-1987 15:01:01.79</DATE>\n<TEXT>\n'
        "<TITLE>{title}</TITLE>\n<DATELINE>{dateline}</DATELINE><BODY>body</BODY>\n"
        "</TEXT>\n</REUTERS>\n"
    )
    path = tmp_path / "reut2-000.sgm"
    path.write_text(
        story.format(id=1, title="T", dateline="NEW YORK &#55357;")
        + story.format(id=2, title="T &#55357;", dateline="NEW YORK"),
        encoding="ascii",
    )
    with ErrorFile(tmp_path / "errors.jsonl") as errors:
        docs = list(read_documents([path], errors=errors))
    assert [d["id"] for d in docs] == ["1"] and docs[0]["meta"]["dateline"] == f"NEW YORK {CUT}"
    assert parse_message(encode(as_message(docs[0]))).meta == docs[0]["meta"]
    (rejected,) = map(json.loads, (tmp_path / "errors.jsonl").read_text().splitlines())
    assert "field 'text' contains an unpaired surrogate" in rejected["reason"]


def test_the_ingest_bridge_forwards_a_record_cut_in_meta_and_refuses_one_cut_in_the_text():
    """The bridge maps source records as the replay reads lines (and dead-lettered this one)."""
    record = {"id": "m", "text": "t", "timestamp": MS, "meta": {"user": f"ab{CUT}"}}
    source = Message(topic="src", partition=0, offset=0, value=json.dumps(record).encode())
    key, value = map_record(source, FieldMapping())
    doc = parse_message(value)
    assert (key, doc.id, doc.text, doc.meta) == (b"default", "m", "t", record["meta"])
    cut = Message(
        topic="src", partition=0, offset=1, value=json.dumps({**record, "text": CUT}).encode()
    )
    with pytest.raises(RecordError, match="'text' contains an unpaired surrogate"):
        map_record(cut, FieldMapping())


def test_a_csv_field_cannot_carry_an_unpaired_surrogate(tmp_path):
    """CSV has no escapes: only the bytes of one (``\\xed\\xa0\\xbd``, not UTF-8) could carry
    it, and they reject their record."""
    path = tmp_path / "c.csv"
    path.write_bytes(b"id,text,timestamp,user\na,t,1717200000000,x\xed\xa0\xbd\n")
    with ErrorFile(tmp_path / "errors.jsonl") as errors:
        assert list(read_documents([path], errors=errors)) == []
    assert "not UTF-8" in (tmp_path / "errors.jsonl").read_text()


@pytest.mark.kafka
@pytest.mark.parametrize("chunk_size", [100_000, 1], ids=["in-memory-sort", "spilled-sort"])
def test_a_tweet_cut_in_meta_reaches_the_topic_and_parses_back_unchanged(
    kafka_bootstrap, topic_name, tmp_path, chunk_size
):
    records = [
        {"id": "a", "text": "plain \u00e9", "timestamp": MS, "stream": "tw", "meta": {"x": 1}},
        {"id": "m", "text": "cut in meta", "timestamp": MS + 1, "stream": "tw", "user": "me"},
        {"id": "t", "text": f"cut in text {CUT}", "timestamp": MS + 2, "stream": "tw"},
        {"id": "b", "text": "paired \U0001f600", "timestamp": MS + 3, "stream": "tw"},
    ]
    lines = [json.dumps(r) for r in records]  # ASCII, the surrogate as "\ud83d"
    meta = {"full_text": f"so happy {CUT}", f"k{CUT}": [CUT]}
    lines[1] = lines[1][:-1] + ', "meta": ' + json.dumps(meta) + "}"
    assert json.loads(lines[1])["meta"] == meta  # what Python's JSON parser makes of the line
    path = tmp_path / "tweets.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    with ErrorFile(tmp_path / "errors.jsonl") as errors:
        docs = read_documents([path], errors=errors)
        summary = replay_documents(
            docs, kafka_bootstrap, topic_name, chunk_size=chunk_size, errors=errors
        )
    assert (summary.produced, summary.rejected, summary.failed) == (3, 0, 0)
    values = _values(kafka_bootstrap, topic_name, 3)
    parsed = [parse_message(v) for v in values]
    assert [d.id for d in parsed] == ["a", "m", "b"]
    assert (parsed[1].text, parsed[1].meta) == ("cut in meta", {"user": "me", **meta})
    assert values[1] == parsed[1].to_json()  # as the detector writes the document back
    for record, value in zip((records[0], records[3]), (values[0], values[2]), strict=True):
        assert value == _old_encoding(as_message(record))
    # The text cut: the detector refuses it, so it is still rejected here, with its line
    (rejected,) = map(json.loads, (tmp_path / "errors.jsonl").read_text().splitlines())
    assert rejected["line"] == 3
    assert "field 'text' contains an unpaired surrogate" in rejected["reason"]
    with pytest.raises(InvalidMessageError, match="'text' contains an unpaired surrogate"):
        parse_message(json.dumps(records[2]).encode())
