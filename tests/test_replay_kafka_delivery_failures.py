"""Replay through a real broker: delivery failures reported and listed, resume after a
rejected document, bad inputs and errors paths refused before anything is produced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.replay.documents import ErrorFile
from sparsewatch.replay.producer import replay_documents

from tests.support.cli import run_cli
from tests.support.kafka_topics import consume_values, topic_exists

pytestmark = pytest.mark.kafka

T0 = 1_700_000_000_000
# A topic whose broker refuses every record (INVALID_RECORD): none may be older than 0 ms
REFUSE_EVERY_RECORD = {"message.timestamp.before.max.ms": "0"}


def _docs(n: int, streams: int = 2) -> list[dict]:
    return [
        {"id": f"d{i}", "text": f"text {i}", "timestamp": T0 + i, "stream": f"s{i % streams}"}
        for i in range(n)
    ]


def _entries(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_broker_refusals_are_counted_and_every_lost_message_listed(
    kafka_bootstrap, topic_name, tmp_path
):
    # The broker refuses every batch of this topic: its records' create time is earlier than
    # the broker's clock by more than 0 ms (a refusal the topic's size limit, which the replay
    # reads at start, does not foretell)
    ensure_topics(kafka_bootstrap, {topic_name: 1}, **REFUSE_EVERY_RECORD)
    errors_path = tmp_path / "errors.jsonl"
    with ErrorFile(errors_path) as errors:
        summary = replay_documents(
            _docs(6), kafka_bootstrap, topic_name, errors=errors, end_of_stream=True
        )
    # 6 documents and 2 end-of-stream markers, none acknowledged
    assert (summary.produced, summary.failed, summary.end_markers) == (0, 8, 0)
    assert "failed to validate record" in summary.errors[0]
    assert len(summary.errors) == 1, summary.errors  # one reason for all 8, said once
    entries = _entries(errors_path)
    documents = [e for e in entries if e["reason"].startswith("document not delivered")]
    markers = [e for e in entries if e["reason"].startswith("end-of-stream marker not delivered")]
    assert sorted(e["raw"] for e in documents) == [f"d{i}" for i in range(6)]
    assert sorted(e["line"] for e in documents) == list(range(1, 7))  # position in event time
    assert sorted(json.loads(e["raw"])["stream"] for e in markers) == ["s0", "s1"]
    assert all(e["source"] == topic_name for e in entries) and len(entries) == 8


def test_messages_still_queued_at_the_flush_timeout_are_listed(tmp_path):
    errors_path = tmp_path / "errors.jsonl"
    with ErrorFile(errors_path) as errors:  # nothing answers at port 1: nothing is delivered
        summary = replay_documents(
            _docs(4),
            "127.0.0.1:1",
            "t-unreachable",
            errors=errors,
            flush_timeout_s=1.0,
            log_level=0,
        )
    assert (summary.produced, summary.failed) == (0, 4)
    assert summary.errors  # a reason for the failure, not an empty list
    assert sorted(e["raw"] for e in _entries(errors_path)) == ["d0", "d1", "d2", "d3"]


def test_cli_delivery_failure_is_an_error_naming_the_errors_file(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
):
    ensure_topics(kafka_bootstrap, {topic_name: 1}, **REFUSE_EVERY_RECORD)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in _docs(3)))
    errors_path = tmp_path / "errors.jsonl"
    code, out, err = run_cli(
        monkeypatch, capsys, "replay", str(corpus), "--topic", topic_name,
        "--bootstrap-servers", kafka_bootstrap, "--errors", str(errors_path), "--json",
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert json.loads(out)["failed"] == 3
    assert sorted(e["raw"] for e in _entries(errors_path)) == ["d0", "d1", "d2"]
    assert "not delivered" in err and str(errors_path) in err


def test_resume_after_a_document_the_producer_rejects_neither_loses_nor_duplicates(
    kafka_bootstrap, topic_name, tmp_path
):
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    docs = _docs(5, streams=1)
    # over this producer's (lowered) message limit, but within the text limit: the producer
    # refuses it when it is handed over (a document over the default 1 MB limit is rejected
    # before the replay begins, with the records that cannot be read)
    docs.insert(1, {"id": "huge", "text": "x" * 150_000, "timestamp": T0, "stream": "s0"})
    common = {
        "max_text_bytes": 200_000,
        "errors": ErrorFile(None),
        "message.max.bytes": 100_000,
    }
    first = replay_documents(docs, kafka_bootstrap, topic_name, limit=3, **common)
    assert (first.produced, first.rejected) == (2, 1)
    # ``skip = produced`` (2) would send d1 twice: the resume point counts the rejected one
    assert first.resume_skip == 3
    second = replay_documents(docs, kafka_bootstrap, topic_name, skip=first.resume_skip, **common)
    assert (second.skipped, second.produced, second.rejected) == (3, 3, 0)
    ids = [v["id"] for v in consume_values(kafka_bootstrap, topic_name)]
    assert ids == [f"d{i}" for i in range(5)]


def test_cli_reports_where_to_resume(kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPARSEWATCH_MAX_TEXT_BYTES", "2000000")
    docs = _docs(6, streams=1)
    docs[2]["text"] = "x" * 1_500_000  # over the producer's 1 MB: rejected when read
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    common = [
        "replay", str(corpus), "--topic", topic_name, "--bootstrap-servers", kafka_bootstrap,
        "--partitions", "1", "--errors", str(tmp_path / "errors.jsonl"), "--json",
    ]  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, *common, "--limit", "4")
    assert code == 0, err
    first = json.loads(out)
    # the rejected document is not in the replay order: the first four of the other five
    assert (first["produced"], first["rejected"], first["resume_skip"]) == (4, 1, 4)
    assert (first["first_timestamp_ms"], first["last_timestamp_ms"]) == (T0, T0 + 4)
    code, out, err = run_cli(monkeypatch, capsys, *common, "--skip", str(first["resume_skip"]))
    assert code == 0, err
    second = json.loads(out)
    assert second["produced"] == 1
    assert (second["first_timestamp_ms"], second["last_timestamp_ms"]) == (T0 + 5, T0 + 5)
    ids = [v["id"] for v in consume_values(kafka_bootstrap, topic_name)]
    assert ids == ["d0", "d1", "d3", "d4", "d5"]


def test_an_input_of_unknown_format_is_refused_before_anything_is_produced(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(_docs(1)[0]) + "\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a corpus\n")
    code, out, err = run_cli(
        monkeypatch, capsys, "replay", str(good), str(notes), "--no-sort", "--topic", topic_name,
        "--bootstrap-servers", kafka_bootstrap, "--errors", str(tmp_path / "errors.jsonl"),
    )  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: ") and "cannot tell the format" in err and "notes.txt" in err
    assert not topic_exists(kafka_bootstrap, topic_name)  # nothing of good.jsonl was produced


@pytest.mark.parametrize("corpus_lines", [1, 2], ids=["clean", "with-a-bad-line"])
def test_an_errors_path_that_cannot_be_written_is_refused_before_anything_is_produced(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys, corpus_lines
):
    corpus = tmp_path / "corpus.jsonl"
    lines = [json.dumps(_docs(1)[0])] + ["{not json"] * (corpus_lines - 1)
    corpus.write_text("\n".join(lines) + "\n")
    errors_path = corpus / "errors.jsonl"  # its folder is a file
    code, out, err = run_cli(
        monkeypatch, capsys, "replay", str(corpus), "--no-sort", "--topic", topic_name,
        "--bootstrap-servers", kafka_bootstrap, "--errors", str(errors_path),
    )  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: cannot write the errors file") and "--errors" in err
    assert not topic_exists(kafka_bootstrap, topic_name)
