"""Replay through a real broker: everything produced once, in event-time order, unchanged."""

from __future__ import annotations

import functools
import gzip
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.replay.documents import read_documents
from sparsewatch.replay.event_sort import sort_by_event_time
from sparsewatch.replay.producer import as_message, replay_documents
from sparsewatch.replay.synthetic import generate_stream

from tests.support.cli import run_cli, run_replay
from tests.support.kafka_topics import consume_messages

pytestmark = pytest.mark.kafka


@pytest.fixture
def replay(kafka_bootstrap, topic_name, monkeypatch, capsys) -> Callable[..., tuple[int, str, str]]:
    """``sparsewatch replay ARGS`` to this test's topic on the broker: status, stdout, stderr."""
    return functools.partial(run_replay, monkeypatch, capsys, topic_name, kafka_bootstrap)


def consume_all(bootstrap: str, topic: str, timeout: float = 90.0) -> list[tuple[int, str, dict]]:
    """Every message of ``topic`` as (partition, key, value), in offset order per partition."""
    return [
        (msg.partition(), msg.key().decode(), json.loads(msg.value()))
        for msg in consume_messages(bootstrap, topic, timeout)
    ]


@pytest.mark.data
@pytest.mark.slow
def test_reuters_corpus_through_the_cli(kafka_bootstrap, topic_name, shared_data, tmp_path, replay):
    corpus = shared_data / "reuters21578.jsonl.gz"
    code, out, err = replay(
        str(corpus),
        "--partitions",
        "1",
        "--chunk-size",
        "5000",
        "--errors",
        str(tmp_path / "errors.jsonl"),
        "--json",
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["read"] == summary["produced"] == 21578
    assert summary["rejected"] == summary["failed"] == 0 and summary["errors_file"] is None
    got = consume_all(kafka_bootstrap, topic_name)
    values = [v for _, _, v in got]
    assert len(values) == 21578
    timestamps = [v["timestamp"] for v in values]
    assert timestamps == sorted(timestamps)
    expected = list(sort_by_event_time(read_documents([corpus])))
    assert values == expected  # content equality, document for document
    assert {k for _, k, _ in got} == {"default"}
    assert len({v["id"] for v in values}) == 21578


def _generated(n_streams: int = 3, n_docs: int = 1500) -> list[dict]:
    docs = []
    for s in range(n_streams):
        docs += generate_stream(n_docs=n_docs, stream=f"stream-{s}", seed=s, seconds_per_doc=7.0)
    random.Random(0).shuffle(docs)
    return docs


def test_generated_multi_stream_corpus_keyed_by_stream(kafka_bootstrap, topic_name):
    ensure_topics(kafka_bootstrap, {topic_name: 3})
    docs = _generated()
    summary = replay_documents(docs, kafka_bootstrap, topic_name, chunk_size=1000)
    assert (summary.read, summary.produced, summary.rejected, summary.failed) == (4500, 4500, 0, 0)
    got = consume_all(kafka_bootstrap, topic_name)
    assert len(got) == 4500
    by_stream: dict[str, list[dict]] = {}
    partition_of: dict[str, set[int]] = {}
    for partition, key, value in got:
        assert key == value["stream"]
        by_stream.setdefault(key, []).append(value)
        partition_of.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in partition_of.values())  # one stream, one partition
    for stream, values in by_stream.items():
        expected = sorted(
            (as_message(d) for d in docs if d["stream"] == stream),
            key=lambda m: m["timestamp"],
        )
        assert values == expected, stream  # per-stream event-time order, identical content


def test_skip_and_limit_resume_without_gaps_or_duplicates(kafka_bootstrap, topic_name):
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    docs = _generated(n_streams=2, n_docs=300)
    first = replay_documents(docs, kafka_bootstrap, topic_name, limit=250)
    second = replay_documents(docs, kafka_bootstrap, topic_name, skip=first.produced)
    assert (first.produced, second.skipped, second.produced) == (250, 250, 350)
    values = [v for _, _, v in consume_all(kafka_bootstrap, topic_name)]
    expected = sorted((as_message(d) for d in docs), key=lambda m: m["timestamp"])
    assert values == [m for m in expected]  # stable: equal timestamps keep input order
    assert len({(v["stream"], v["id"]) for v in values}) == 600


def test_end_of_stream_markers_follow_each_streams_last_document(kafka_bootstrap, topic_name):
    ensure_topics(kafka_bootstrap, {topic_name: 2})
    docs = _generated(n_streams=3, n_docs=60)
    summary = replay_documents(docs, kafka_bootstrap, topic_name, end_of_stream=True)
    assert (summary.produced, summary.end_markers) == (180, 3)
    by_stream: dict[str, list[dict]] = {}
    for _, key, value in consume_all(kafka_bootstrap, topic_name):
        by_stream.setdefault(key, []).append(value)
    assert len(by_stream) == 3
    for stream, values in by_stream.items():  # same key: same partition, after the documents
        assert values[-1] == {"stream": stream, "end_of_stream": True}
        assert all("end_of_stream" not in v for v in values[:-1]) and len(values) == 61


def test_rate_limited_replay_delivers_everything(kafka_bootstrap, topic_name):
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    docs = _generated(n_streams=1, n_docs=20)
    summary = replay_documents(docs, kafka_bootstrap, topic_name, rate=20.0)
    assert summary.produced == 20
    # paced, not sent at once: the 20th document leaves 19 / 20 s after the first (unpaced, the
    # replay takes 0.05-0.5 s; a lower bound only: a loaded machine may take longer)
    assert summary.elapsed_s >= 19 / 20
    assert len(consume_all(kafka_bootstrap, topic_name)) == 20


def test_malformed_files_good_records_still_produced(kafka_bootstrap, topic_name, tmp_path, replay):
    good = [
        {"id": f"g{i}", "text": f"good {i}", "timestamp": 1_700_000_000_000 + i, "stream": "s"}
        for i in range(30)
    ]
    # Truncated gzip: the first records survive, the cut is reported.
    body = "".join(json.dumps(d) + "\n" for d in good[:20]) + "".join(
        json.dumps({"id": f"pad{i}", "text": "x" * 300, "timestamp": 1}) + "\n" for i in range(300)
    )
    blob = gzip.compress(body.encode())
    (tmp_path / "cut.jsonl.gz").write_bytes(blob[: len(blob) * 2 // 3])
    lines = [json.dumps(d).encode() for d in good[20:25]] + [
        b"{not json",
        json.dumps({"id": "m", "timestamp": 5}).encode(),
        json.dumps({"id": "t", "text": "t", "timestamp": "31/12/2024"}).encode(),
        b'{"id": "u", "text": "\xff\xfe", "timestamp": 5}',
    ]
    (tmp_path / "bad.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (tmp_path / "bad.csv").write_text(
        "id,text,timestamp,stream\n"
        + "".join(f"{d['id']},{d['text']},{d['timestamp']},s\n" for d in good[25:])
        + "x,,\n"
    )
    errors = tmp_path / "errors.jsonl"
    code, out, err = replay(
        str(tmp_path / "cut.jsonl.gz"),
        str(tmp_path / "bad.jsonl"),
        str(tmp_path / "bad.csv"),
        "--partitions",
        "1",
        "--errors",
        str(errors),
    )
    assert code == 0, err
    entries = [json.loads(x) for x in errors.read_text().splitlines()]
    sources = [(Path(e["source"]).name, e["line"]) for e in entries]
    assert ("bad.jsonl", 6) in sources and ("bad.jsonl", 7) in sources
    assert ("bad.jsonl", 8) in sources and ("bad.jsonl", 9) in sources
    assert ("bad.csv", 7) in sources
    assert any(e["reason"].startswith("truncated gzip") for e in entries)
    values = [v for _, _, v in consume_all(kafka_bootstrap, topic_name)]
    ids = {v["id"] for v in values}
    assert {d["id"] for d in good} <= ids  # every good record was produced
    n_pad = len(ids - {d["id"] for d in good})
    assert f"rejected {len(entries)}" in out
    assert f"produced {30 + n_pad}" in out and f"read {30 + n_pad + len(entries)}" in out
    assert str(errors) in out


def test_unreachable_broker_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "t", "timestamp": 1}) + "\n")
    code, _, err = run_cli(
        monkeypatch,
        capsys,
        "replay",
        str(path),
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--connect-timeout",
        "2",
    )
    assert code == 2 and err.startswith("error: cannot reach Kafka") and err.count("\n") == 1
    assert "Traceback" not in err


def test_unproducible_and_invalid_documents_are_rejected_not_dropped(
    kafka_bootstrap, topic_name, tmp_path
):
    from sparsewatch.replay.documents import ErrorFile

    ensure_topics(kafka_bootstrap, {topic_name: 1})
    docs = [{"id": f"d{i}", "text": "fine", "timestamp": 1_700_000_000_000 + i} for i in range(5)]
    docs.insert(2, {"id": "huge", "text": "x" * 3_000_000, "timestamp": 1_700_000_000_001})
    docs.insert(4, {"id": "no-time", "text": "t"})
    docs.insert(5, {"id": "big", "text": "x" * 5_000, "timestamp": 1_700_000_000_002})
    # A text limit above the producer's message limit: a document over it is rejected with the
    # others before anything is produced; one over a lower limit of this producer's is refused
    # by the producer itself.
    with ErrorFile(tmp_path / "errors.jsonl") as errors:
        summary = replay_documents(
            docs,
            kafka_bootstrap,
            topic_name,
            errors=errors,
            max_text_bytes=4_000_000,
            **{"message.max.bytes": 4_000},
        )
    assert (summary.produced, summary.rejected, summary.failed) == (5, 3, 0)
    entries = [json.loads(x) for x in (tmp_path / "errors.jsonl").read_text().splitlines()]
    assert [e["reason"].split(":")[0] for e in entries] == [
        "message of 3000133 bytes exceeds the Kafka producer's limit of 1000000 bytes "
        "(message.max.bytes)",
        "missing timestamp field 'timestamp'",
        "cannot produce",
    ]
    assert [v["id"] for _, _, v in consume_all(kafka_bootstrap, topic_name)] == [
        f"d{i}" for i in range(5)
    ]


def test_cli_field_mapping_skip_and_limit(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
):
    rows = "".join(
        f'{i},"head {i}","body, {i}",{1_700_000_000_000 + (i * 7919) % 100},ch{i % 2},a;b\n'
        for i in range(40)
    )
    path = tmp_path / "corpus.csv"
    path.write_text("key,headline,story,when,channel,tags\n" + rows)
    common = [
        "replay", str(path), "--topic", topic_name, "--bootstrap-servers", kafka_bootstrap,
        "--partitions", "1", "--id-field", "key", "--text-field", "headline",
        "--text-field", "story", "--timestamp-field", "when", "--stream-field", "channel",
        "--labels-field", "tags", "--errors", str(tmp_path / "e.jsonl"), "--json",
    ]  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, *common, "--limit", "15")
    assert code == 0, err
    assert json.loads(out)["produced"] == 15
    code, out, err = run_cli(monkeypatch, capsys, *common, "--skip", "15", "--rate", "500")
    assert code == 0, err
    assert (json.loads(out)["skipped"], json.loads(out)["produced"]) == (15, 25)
    got = consume_all(kafka_bootstrap, topic_name)
    values = [v for _, _, v in got]
    assert sorted(v["id"] for v in values) == sorted(str(i) for i in range(40))
    assert [v["timestamp"] for v in values] == sorted(v["timestamp"] for v in values)
    first = next(v for v in values if v["id"] == "3")
    assert first == {
        "id": "3",
        "text": "head 3\n\nbody, 3",
        "timestamp": 1_700_000_000_000 + (3 * 7919) % 100,
        "stream": "ch1",
        "labels": ["a", "b"],
        "meta": {},
    }
    assert all(key == v["stream"] for _, key, v in got)


@pytest.mark.parametrize("spelling", ["same", "dotted", "symlink", "hardlink"])
def test_an_errors_path_that_is_an_input_is_refused_and_the_input_kept(tmp_path, replay, spelling):
    corpus = tmp_path / "corpus.jsonl"
    body = json.dumps({"id": "1", "text": "precious", "timestamp": 1_700_000_000_000}) + "\n"
    corpus.write_text(body)
    (tmp_path / "sub").mkdir()
    errors = {
        "same": corpus,
        "dotted": tmp_path / "sub" / ".." / "corpus.jsonl",
        "symlink": tmp_path / "sub" / "link.jsonl",
        "hardlink": tmp_path / "sub" / "hard.jsonl",
    }[spelling]
    if spelling == "symlink":
        errors.symlink_to(corpus)
    elif spelling == "hardlink":
        errors.hardlink_to(corpus)
    code, out, err = replay(str(corpus), "--errors", str(errors))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: ") and "--errors" in err and str(corpus) in err
    assert corpus.read_text() == body


def test_an_existing_errors_file_is_replaced_only_when_a_run_completes(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
):
    corpus = tmp_path / "corpus.jsonl"
    good = json.dumps({"id": "1", "text": "t", "timestamp": 1_700_000_000_000})
    corpus.write_text(good + "\n{not json\n")
    errors = tmp_path / "errors.jsonl"
    earlier = '{"source": "old.jsonl", "line": 1, "reason": "r", "raw": ""}\n'
    errors.write_text(earlier)
    common = ["replay", str(corpus), "--topic", topic_name, "--errors", str(errors), "--json"]
    unreachable = ["--bootstrap-servers", "127.0.0.1:1", "--connect-timeout", "2"]
    code, _, err = run_cli(monkeypatch, capsys, *common, *unreachable)
    assert code == 2 and err.startswith("error: cannot reach Kafka")
    assert errors.read_text() == earlier  # a failed run leaves the earlier errors alone
    code, out, err = run_cli(monkeypatch, capsys, *common, "--bootstrap-servers", kafka_bootstrap)
    assert code == 0, err
    assert json.loads(out)["errors_file"] == str(errors)
    entries = [json.loads(x) for x in errors.read_text().splitlines()]
    assert [(e["source"], e["line"]) for e in entries] == [(str(corpus), 2)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "errors.jsonl"]
    corpus.write_text(good + "\n")
    code, out, err = run_cli(monkeypatch, capsys, *common, "--bootstrap-servers", kafka_bootstrap)
    assert code == 0, err
    assert json.loads(out)["errors_file"] is None and not errors.exists()


def test_errors_another_replay_wrote_meanwhile_are_kept(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
):
    """Two replays with one data_dir: the one ending later without rejections removed the
    errors file the other had just named in its summary. A file written after this replay
    started (its time in the future here: another replay ended meanwhile) stays."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "1", "text": "t", "timestamp": 1_700_000_000_000}) + "\n")
    errors = tmp_path / "errors.jsonl"
    theirs = '{"source": "other.jsonl", "line": 3, "reason": "r", "raw": ""}\n'
    errors.write_text(theirs)
    later = time.time() + 3600
    os.utime(errors, (later, later))
    args = ["replay", str(corpus), "--topic", topic_name, "--errors", str(errors), "--json"]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--bootstrap-servers", kafka_bootstrap)
    assert code == 0, err
    assert json.loads(out)["errors_file"] is None and errors.read_text() == theirs


def test_configured_text_limit_and_detector_limits_reject_records_with_their_line(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, replay
):
    monkeypatch.setenv("SPARSEWATCH_MAX_TEXT_BYTES", "1000")
    base = {"timestamp": 1_700_000_000_000, "stream": "s"}
    rows = [
        {**base, "id": "fits", "text": "x" * 1000},
        {**base, "id": "long-text", "text": "x" * 1001},
        {**base, "id": "long-stream", "text": "t", "stream": "s" * 129},
        {**base, "id": "i" * 513, "text": "t"},
        {**base, "id": "short", "text": "t"},
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    errors = tmp_path / "errors.jsonl"
    code, out, err = replay(str(corpus), "--partitions", "1", "--errors", str(errors), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["read"], summary["produced"], summary["rejected"]) == (5, 2, 3)
    entries = [json.loads(x) for x in errors.read_text().splitlines()]
    assert [(e["source"], e["line"]) for e in entries] == [(str(corpus), n) for n in (2, 3, 4)]
    assert "text longer than 1000 bytes" in entries[0]["reason"]
    assert "'stream' is longer than 128" in entries[1]["reason"]
    assert "'id' is longer than 512" in entries[2]["reason"]
    assert sorted(v["id"] for _, _, v in consume_all(kafka_bootstrap, topic_name)) == [
        "fits",
        "short",
    ]


@pytest.mark.parametrize("stream", ["", "  ", "s" * 129])
def test_a_default_stream_the_detector_refuses_is_a_usage_error(tmp_path, replay, stream):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "1", "text": "t", "timestamp": 1_700_000_000_000}) + "\n")
    code, out, err = replay(
        str(corpus), "--errors", str(tmp_path / "errors.jsonl"), "--stream", stream
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: ") and "--stream" in err


def test_epoch_seconds_with_timestamp_unit_s_and_a_hint_without(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
):
    """A corpus of epoch seconds (tweet dumps often are) was read as milliseconds without a word:
    a month of 2023 landed in 43 minutes of January 1970."""
    records = [
        {"id": "a", "text": "first", "timestamp": 1_700_000_000},
        {"id": "b", "text": "second", "timestamp": 1_700_000_000.25},
        {"id": "c", "text": "third", "timestamp": "1700003600.5"},
        {"id": "d", "text": "fourth", "timestamp": "2023-11-14T23:13:21Z"},
    ]
    path = tmp_path / "seconds.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    common = ["replay", str(path), "--bootstrap-servers", kafka_bootstrap, "--partitions", "1"]
    code, _, err = run_cli(
        monkeypatch, capsys, *common, "--topic", topic_name, "--timestamp-unit", "s"
    )
    assert code == 0 and err == ""
    got = {v["id"]: v["timestamp"] for _, _, v in consume_all(kafka_bootstrap, topic_name)}
    assert got == {
        "a": 1_700_000_000_000,
        "b": 1_700_000_000_250,
        "c": 1_700_003_600_500,
        "d": 1_700_003_601_000,  # ISO-8601 is read as it is
    }
    seconds_only = tmp_path / "seconds_only.jsonl"
    seconds_only.write_text("".join(json.dumps(r) + "\n" for r in records[:3]))
    other = f"{topic_name}-ms"
    code, _, err = run_cli(
        monkeypatch, capsys, "replay", str(seconds_only), "--topic", other,
        "--bootstrap-servers", kafka_bootstrap, "--partitions", "1",
    )  # fmt: skip
    assert code == 0
    assert err == (
        "note: read as epoch milliseconds, every timestamp falls in 1970-01-12..1973-03-03; if "
        "they are epoch seconds, replay them with --timestamp-unit s\n"
    )
    assert sorted(v["timestamp"] for _, _, v in consume_all(kafka_bootstrap, other)) == [
        1_700_000_000,
        1_700_000_000,
        1_700_003_600,
    ]
