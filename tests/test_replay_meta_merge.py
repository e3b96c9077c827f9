"""A record's own ``meta`` object is merged into the document's meta, not nested under it:
replaying a dump of a docs topic (``Document.to_json`` lines) gave ``{"meta": {"meta": ...}}``,
one level deeper at every round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparsewatch.consumers.field_mapping import to_document
from sparsewatch.consumers.messages import RecordError, encode, parse_document
from sparsewatch.replay.documents import read_documents
from sparsewatch.replay.producer import as_message


def _replay_file(path: Path) -> list[dict]:
    return list(read_documents([path]))


def test_a_dump_of_the_docs_topic_replays_to_the_same_messages(tmp_path: Path) -> None:
    first = {
        "id": "a",
        "text": "quake hits the coast",
        "timestamp": 1_700_000_000_000,
        "stream": "news",
        "labels": ["quake"],
        "meta": {"source": "wire", "rank": 3},
    }
    dump = tmp_path / "round0.jsonl"
    dump.write_bytes(encode(as_message(first)) + b"\n")
    for round_ in range(1, 4):  # replay the dump of the previous round's topic
        (message,) = _replay_file(dump)
        assert message["meta"] == {"source": "wire", "rank": 3}
        doc = parse_document(encode(message))
        assert doc.meta == {"source": "wire", "rank": 3}
        dump = tmp_path / f"round{round_}.jsonl"
        dump.write_bytes(doc.to_json() + b"\n")


def test_unused_fields_and_the_record_meta_merge_with_the_meta_winning() -> None:
    fields = {"id": "a", "text": "t", "timestamp": 0, "lang": "en", "meta": {"lang": "de", "x": 1}}
    assert to_document(fields)["meta"] == {"lang": "de", "x": 1}
    assert as_message(fields)["meta"] == {"lang": "de", "x": 1}


def test_a_meta_field_that_is_no_object_is_kept_by_the_reader_and_refused_by_as_message() -> None:
    fields = {"id": "a", "text": "t", "timestamp": 0, "meta": "from the crawler"}
    assert to_document(fields)["meta"] == {"meta": "from the crawler"}
    with pytest.raises(RecordError, match="meta must be a JSON object"):
        as_message(fields)


def test_a_null_meta_is_no_meta(tmp_path: Path) -> None:
    path = tmp_path / "null.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "t", "timestamp": 0, "meta": None}) + "\n")
    (message,) = _replay_file(path)
    assert message["meta"] == {}
    assert as_message({"id": "a", "text": "t", "timestamp": 0, "meta": None})["meta"] == {}
