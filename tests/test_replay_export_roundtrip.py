"""Round trips: documents exported by ``sparsewatch documents --format json|csv`` and replayed by
``sparsewatch replay`` into a fresh topic come back, as the detector parses them, with their ids,
texts (byte for byte), event times to the millisecond and labels."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from sparsewatch.consumers.field_mapping import parse_labels
from sparsewatch.consumers.messages import Document, parse_document
from sparsewatch.replay.readers import Rejected, SourceRecord, read_jsonl
from sparsewatch.storage.store import Store

from tests.support.cli import run_cli

T0 = datetime(2024, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)
TEXTS = (
    "plain words",
    "emoji 😀 and 𝄞 clef, 中文\nsecond line",
    "windows\r\nline ends and a lone\rcarriage return",
    '  leading and trailing blanks, "quotes", commas; semicolons | bars  ',
    "tab\there, backslash \\ and a [bracket]",
)
LABELS = (["a", "b"], [], ["topic;with;semicolons"], ["x|y", "ünï"], ["[not json"])


def stored_documents() -> list[dict]:
    """Documents as a worker stores them: one per text, with labels and millisecond times."""
    return [
        {
            "stream": "news" if i % 2 else "tweets",
            "doc_id": f"doc-{i}-😀",
            "event_time": T0 + timedelta(seconds=i, milliseconds=7 * i),
            "window_seq": 1,
            "novelty_score": 0.5,
            "reconstruction_error": 0.25,
            "novel": False,
            "late": False,
            "dominant_topic": 1,
            "top_atoms": [1, 2],
            "labels": LABELS[i],
            "text": text,
        }
        for i, text in enumerate(TEXTS)
    ]


def export(monkeypatch, capsys, url: str, fmt: str, path: Path) -> None:
    """``sparsewatch documents --format FMT > PATH`` of a database holding stored_documents()."""
    with Store.open(url) as store, store.transaction() as tx:
        tx.upsert_window("news", 1, T0, T0 + timedelta(hours=1), 5, 0.9, {}, "watermark")
        tx.upsert_window("tweets", 1, T0, T0 + timedelta(hours=1), 5, 0.9, {}, "watermark")
        tx.insert_documents(stored_documents())
    code, out, err = run_cli(
        monkeypatch, capsys, "documents", "--database-url", url, "--format", fmt
    )
    assert code == 0, err
    path.write_bytes(out.encode("utf-8"))


def consume_documents(bootstrap: str, topic: str, expected: int) -> list[Document]:
    """The documents of ``topic`` as the detector parses them."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "log_level": 3}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        documents: list[Document] = []
        for _ in range(60):
            for message in consumer.consume(num_messages=100, timeout=1.0):
                if message.error() is None:
                    documents.append(parse_document(message.value()))
            if len(documents) >= expected:
                break
        return documents
    finally:
        consumer.close()


def assert_same_documents(documents: list[Document]) -> None:
    originals = {d["doc_id"]: d for d in stored_documents()}
    assert sorted(d.id for d in documents) == sorted(originals)
    for document in documents:
        original = originals[document.id]
        assert document.text.encode("utf-8") == original["text"].encode("utf-8")
        assert document.stream == original["stream"]
        assert document.event_time == original["event_time"]
        assert list(document.labels) == original["labels"]


@pytest.mark.kafka
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_exported_documents_replay_as_the_originals(
    fmt, database_url, kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
):
    """The JSON export (one JSON array) was rejected line by line, every document lost; the CSV
    export's labels (a JSON list in a cell) came back as one label ``["a", "b"]``."""
    corpus = tmp_path / f"documents.{fmt}"
    export(monkeypatch, capsys, database_url, fmt, corpus)
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "replay",
        str(corpus),
        "--topic",
        topic_name,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--errors",
        str(tmp_path / "errors.jsonl"),
    )
    assert code == 0, err
    assert f"produced {len(TEXTS)}, rejected 0" in out
    assert_same_documents(consume_documents(kafka_bootstrap, topic_name, len(TEXTS)))


def test_json_array_file_yields_its_objects_by_line(tmp_path):
    """A file that is one JSON array yields each element, by the line it starts on; an element
    that is no object is rejected alone."""
    path = tmp_path / "export.json"
    path.write_text('\n[\n  {"id": "a", "text": "x\\ud83d\\ude00"},\n  7, {"id": "b"}\n]\n')
    records = list(read_jsonl(path))
    assert records == [
        SourceRecord(str(path), 3, {"id": "a", "text": "x😀"}),
        Rejected(str(path), 4, "not a JSON object but int", "7"),
        SourceRecord(str(path), 4, {"id": "b"}),
    ]


@pytest.mark.parametrize(
    ("content", "first_reason"),
    [
        ("[1, 2\n", "invalid JSON"),  # unclosed: still read (and rejected) line by line
        ('[{"id": 1}] trailing\n', "invalid JSON"),
        ('[{"id": 1}]\n[{"id": 2}]\n', "not a JSON object but list"),  # JSON lines of arrays
    ],
)
def test_a_file_that_is_no_json_array_is_read_by_line(tmp_path, content, first_reason):
    path = tmp_path / "bad.json"
    path.write_text(content)
    records = list(read_jsonl(path))
    assert records and all(isinstance(r, Rejected) for r in records)
    assert records[0].line == 1 and records[0].reason.startswith(first_reason)


def test_labels_cell_written_as_json_list():
    assert parse_labels('["a", "b;c", "ünï"]') == ["a", "b;c", "ünï"]
    assert parse_labels("[not json; b") == ["[not json", "b"]
    assert parse_labels('{"a": 1}') == ['{"a": 1}']
