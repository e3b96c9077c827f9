"""Replay: records that crashed the whole replay (and put the ingest bridge
in a crash loop) now rejected one by one, time zones honoured or refused, a nested text not
copied into ``meta``, Reuters' unprocessed stories kept, errors paths that are no regular file
left in place, end-of-stream markers that follow the corpus rather than the slice, SIGTERM
handled as Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from sparsewatch.consumers.field_mapping import FieldMapping, to_document
from sparsewatch.consumers.messages import RecordError
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.replay.documents import ErrorFile
from sparsewatch.replay.readers import Rejected, read_reuters_sgml

from tests.support.cli import run_cli
from tests.support.kafka_topics import consume_values

T0 = 1_767_225_600_000  # 2026-01-01


@pytest.mark.parametrize(
    ("value", "unit_ms", "reason"),
    [
        ("Fri, 31 Dec 9999 23:59:59 -0100", 1, "date value out of range"),  # was OverflowError
        (1e306, 1000, "is outside 1970..2200"),  # was OverflowError (infinite milliseconds)
        ("Wed, 10 Oct 2018 20:19:24 CET", 1, "unknown time zone 'CET'"),  # was read as UTC
        ("Wed, 10 Oct 2018 20:19:24 +2500", 1, "time zone offset of a day or more"),
        ("01-Mar-2026 10:00:00 PST", 1, "time zone 'PST': give +HHMM"),  # was ignored
        ("01-Mar-2026 10:00:00 +2460", 1, "time zone offset '+2460'"),
    ],
)
def test_unusable_timestamps_are_record_errors(value, unit_ms, reason) -> None:
    with pytest.raises(RecordError, match=reason.replace("(", r"\(").replace("+", r"\+")):
        parse_timestamp_ms(value, unit_ms)


@pytest.mark.parametrize(
    ("value", "expected_ms"),
    [
        ("01-Mar-2026 10:00:00 +0100", 1_772_355_600_000),  # 09:00 UTC: the offset was ignored
        ("01-Mar-2026 10:00:00 -05:30", 1_772_379_000_000),
        ("01-Mar-2026 10:00:00 GMT", 1_772_359_200_000),
        ("01-Mar-2026 10:00:00", 1_772_359_200_000),
        ("Wed, 10 Oct 2018 20:19:24 EDT", 1_539_217_164_000),  # RFC 2822's zone names still read
        ("Wed, 10 Oct 2018 20:19:24 UT", 1_539_202_764_000),
        ("Wed Oct 10 20:19:24 +0100 2018", 1_539_199_164_000),
    ],
)
def test_time_zones_are_honoured(value, expected_ms) -> None:
    assert parse_timestamp_ms(value) == expected_ms


def _jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.kafka
def test_one_bad_record_is_rejected_and_the_rest_replayed(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    """An out-of-range RFC 2822 date and objects nested too deeply to write stopped the whole
    replay with a traceback (exit 1), nothing produced; the ingest bridge, mapping the same
    records, died on them at every restart. How deep is too deep is the interpreter's: Python
    3.11 refuses the record nested 985 deep (writing it), 3.13 reads and writes it whole; every
    version refuses the one nested 100,000 deep (reading it)."""
    deep = '{"id": "deep", "text": "t", "timestamp": 0, "x": ' + "[" * 985 + "]" * 985 + "}\n"
    deeper = '{"id": "deeper", "text": "t", "timestamp": 0, "x": ' + "[" * 100_000
    deeper += "]" * 100_000 + "}\n"
    corpus = _jsonl(
        tmp_path / "mixed.jsonl",
        [
            {"id": "1", "text": "ok one", "timestamp": T0},
            {"id": "2", "text": "boom", "timestamp": "Fri, 31 Dec 9999 23:59:59 -0100"},
            deep,
            deeper,
            {"id": "4", "text": "ok four", "timestamp": T0 + 1},
        ],
    )
    errors = tmp_path / "errors.jsonl"
    code, out, err = run_cli(
        monkeypatch, capsys, "replay", str(corpus), "--topic", topic_name,
        "--bootstrap-servers", kafka_bootstrap, "--errors", str(errors), "--json",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    values = consume_values(kafka_bootstrap, topic_name)
    ids = sorted(v["id"] for v in values)
    assert ids in (["1", "4"], ["1", "4", "deep"]), ids
    assert summary["produced"] == len(ids) and summary["rejected"] == 5 - len(ids)
    reasons = [json.loads(line)["reason"] for line in errors.read_text().splitlines()]
    assert len(reasons) == 5 - len(ids)
    assert any("date value out of range" in r for r in reasons)
    assert sum("nested too deeply" in r for r in reasons) == 5 - len(ids) - 1
    if "deep" in ids:  # read and written whole
        (copy,) = (v for v in values if v["id"] == "deep")
        assert json.dumps(copy["meta"]["x"]) == "[" * 985 + "]" * 985


def test_a_nested_text_is_not_copied_into_meta() -> None:
    """The meta kept the whole parent object of a dotted field, so a long nested text travelled
    twice and a message with 90 kB of it went over the size limit."""
    text = "x" * 90_000
    tweet = {
        "id_str": "7",
        "created_at": "Wed Oct 10 20:19:24 +0000 2018",
        "text": "x" * 140,
        "extended_tweet": {"full_text": text, "entities": {"hashtags": ["a"]}},
        "user": {"lang": "en", "screen_name": "u"},
    }
    before = json.dumps(tweet)
    mapping = FieldMapping(
        id="id_str",
        text=("extended_tweet.full_text|text",),
        timestamp="created_at",
        stream="user.lang",
    )
    doc = to_document(tweet, mapping)
    assert doc["text"] == text and doc["stream"] == "en"
    assert doc["meta"] == {
        "extended_tweet": {"entities": {"hashtags": ["a"]}},
        "user": {"screen_name": "u"},
    }
    assert json.dumps(tweet) == before  # the record's own objects untouched
    only = to_document(
        {"id": 1, "timestamp": T0, "a": {"b": {"c": "t"}}}, FieldMapping(text=("a.b.c",))
    )
    assert only["text"] == "t" and only["meta"] == {}  # objects left empty go too


def test_unprocessed_reuters_stories_keep_their_text(tmp_path) -> None:
    """A ``<TEXT TYPE="UNPROC">`` story has no TITLE or BODY: its text was dropped (an empty
    document, not reported)."""
    sgml = (
        '<REUTERS TOPICS="NO" LEWISSPLIT="TRAIN" CGISPLIT="TRAINING-SET" OLDID="5" NEWID="99">\n'
        "<DATE>26-FEB-1987 15:01:01.79</DATE>\n<TOPICS></TOPICS>\n"
        '<TEXT TYPE="UNPROC">&#2;\nFEDERAL RESERVE WEEKLY REPORT 1 - FEB 26\n'
        " Two weeks ended Feb 25      daily avgs-mlns\n&#3;</TEXT>\n</REUTERS>\n"
        '<REUTERS TOPICS="YES" NEWID="100">\n<DATE>26-FEB-1987 15:02:20.00</DATE>\n'
        "<TEXT>&#2;\n<TITLE>A TITLE</TITLE>\n<BODY>A body.\n&#3;</BODY></TEXT>\n</REUTERS>\n"
    )
    path = tmp_path / "reut2-000.sgm"
    path.write_text(sgml, encoding="latin-1")
    fields = {
        r.fields["id"]: r.fields for r in read_reuters_sgml(path) if not isinstance(r, Rejected)
    }
    assert fields["99"]["title"] == ""
    assert fields["99"]["body"].startswith("FEDERAL RESERVE WEEKLY REPORT 1 - FEB 26")
    assert "daily avgs-mlns" in fields["99"]["body"]
    assert (fields["100"]["title"], fields["100"]["body"]) == ("A TITLE", "A body.")


@pytest.mark.parametrize(
    ("content", "rejected"),
    [
        ('{"id": "a", "text": "t", "timestamp": 0}\n', 1),  # JSONL read as Reuters
        ("id,text\n1,t\n", 1),
        ('<!DOCTYPE lewis SYSTEM "lewis.dtd">\n', 1),
        ("", 1),  # an empty file is one rejection, as a CSV's (it was none)
        ("  \n\n", 1),
    ],
)
def test_a_file_without_reuters_elements_is_reported(tmp_path, content, rejected) -> None:
    """A JSONL or CSV corpus replayed with ``--input-format reuters`` read as zero documents,
    nothing rejected, exit 0: the analyst saw an empty replay and no hint why."""
    path = tmp_path / "corpus.txt"
    path.write_text(content)
    records = list(read_reuters_sgml(path))
    assert all(isinstance(r, Rejected) for r in records) and len(records) == rejected
    expected = "no REUTERS element" if content.strip() else "empty file (no records)"
    assert records[0].line == 1 and expected in records[0].reason
    assert records[0].raw.strip() == content.strip()[: len(records[0].raw.strip())]


def test_an_errors_path_that_is_no_regular_file_is_written_not_replaced(tmp_path) -> None:
    """``--errors`` naming a FIFO (or, as root, /dev/null) replaced it by a regular file, or
    removed it after a run without rejections."""
    fifo = tmp_path / "errors.fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.extend(fifo.open().read().splitlines()))
    reader.start()
    with ErrorFile(fifo) as errors:
        errors.write(Rejected("a.jsonl", 3, "bad", "{"))
        errors.write(Rejected("a.jsonl", 4, "worse", "}"))
    reader.join(10)
    assert [json.loads(line)["line"] for line in received] == [3, 4]
    assert fifo.is_fifo() and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.kafka
def test_a_special_errors_path_survives_a_replay_without_rejections(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    fifo = tmp_path / "errors.fifo"
    os.mkfifo(fifo)
    corpus = _jsonl(tmp_path / "a.jsonl", [{"id": "1", "text": "t", "timestamp": T0}])
    code, _, err = run_cli(
        monkeypatch, capsys, "replay", str(corpus), "--topic", topic_name,
        "--bootstrap-servers", kafka_bootstrap, "--errors", str(fifo),
    )  # fmt: skip
    assert code == 0, err
    assert fifo.is_fifo()


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("slice_args", "documents", "markers"),
    [
        (("--limit", "1"), ["a1"], []),  # A goes on after the limit: no marker (was one)
        (("--limit", "2"), ["a1", "a2"], ["A"]),
        (("--skip", "2"), ["b1", "b2"], ["A", "B"]),  # A ended in the skipped part (was none)
        (("--skip", "1", "--limit", "2"), ["a2", "b1"], ["A"]),
    ],
)
def test_end_of_stream_markers_follow_the_corpus_not_the_slice(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys, slice_args, documents, markers
) -> None:
    corpus = _jsonl(
        tmp_path / "eos.jsonl",
        [
            {"id": doc_id, "text": "x", "timestamp": T0 + i, "stream": doc_id[0].upper()}
            for i, doc_id in enumerate(["a1", "a2", "b1", "b2"])
        ],
    )
    code, _, err = run_cli(
        monkeypatch, capsys, "replay", str(corpus), "--topic", topic_name,
        "--bootstrap-servers", kafka_bootstrap, "--end-of-stream", "--json", *slice_args,
    )  # fmt: skip
    assert code == 0, err
    values = consume_values(kafka_bootstrap, topic_name)
    assert sorted(v["id"] for v in values if "id" in v) == documents
    assert sorted(v["stream"] for v in values if v.get("end_of_stream")) == markers
    for stream in markers:  # after the stream's last document on its partition
        mine = [v for v in values if v["stream"] == stream]
        assert mine[-1] == {"stream": stream, "end_of_stream": True}
    code, _, err = run_cli(
        monkeypatch, capsys, "replay", str(corpus), "--topic", topic_name,
        "--bootstrap-servers", kafka_bootstrap, "--end-of-stream", "--limit", "1", "--no-sort",
    )  # fmt: skip
    assert code == 2 and "drop --no-sort" in err and err.count("\n") == 1


@pytest.mark.kafka
def test_sigterm_stops_a_replay_as_ctrl_c_does(kafka_bootstrap, topic_name, tmp_path) -> None:
    """SIGTERM (``timeout``, ``docker stop``) ended the replay at once: nothing flushed, no
    summary or resume point, a temporary errors file left behind."""
    corpus = _jsonl(
        tmp_path / "slow.jsonl",
        [{"id": str(i), "text": "t", "timestamp": T0 + i} for i in range(400)] + ["{bad\n"],
    )
    env = {**os.environ, "SPARSEWATCH_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparsewatch", "replay", str(corpus), "--topic", topic_name,
         "--bootstrap-servers", kafka_bootstrap, "--rate", "50", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "probe"})
    try:  # until the replay has produced some
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            topics = probe.list_topics(timeout=10).topics
            if topic_name in topics:
                try:
                    ends = [
                        probe.get_watermark_offsets(TopicPartition(topic_name, p), timeout=10)[1]
                        for p in topics[topic_name].partitions
                    ]
                except KafkaException:  # a topic just created: its leader not elected yet
                    ends = []
                if sum(ends) >= 20:
                    break
            time.sleep(0.2)
    finally:
        probe.close()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    summary = json.loads(out)
    assert summary["interrupted"] and 0 < summary["produced"] < 400
    produced = consume_values(kafka_bootstrap, topic_name)
    assert len(produced) == summary["produced"] == summary["resume_skip"]
    errors = tmp_path / "data" / "replay-errors.jsonl"
    assert errors.is_file() and not list(errors.parent.glob(".*.tmp"))


@pytest.mark.parametrize("inside", ["count", "delivery report"])
def test_an_interrupt_during_a_hand_over_or_a_report_waits_for_its_count(
    kafka_bootstrap, topic_name, monkeypatch, inside
) -> None:
    """SIGTERM landing between the producer's hand-over and the loop's count of it, or inside a
    delivery report, left the summary short of the topic (30 documents on it, resume point or
    produced count 29): a resumed replay sent a document twice. Both now run with SIGINT and
    SIGTERM held; the signal, sent from inside them here, takes effect right after."""
    from sparsewatch.replay import producer as replay_producer

    real, sent = replay_producer._hand_over, []

    def hand_over(producer, topic, key, value, report, count, interrupts):
        def interrupt_once() -> None:
            if not sent:
                sent.append(1)
                os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt once it is let through

        def count_then(refused):
            if inside == "count" and json.loads(value).get("id") == "29":
                interrupt_once()
            count(refused)

        def report_then(err, msg):
            if inside == "delivery report" and json.loads(msg.value()).get("id") == "29":
                interrupt_once()
            report(err, msg)

        real(producer, topic, key, value, report_then, count_then, interrupts)

    monkeypatch.setattr(replay_producer, "_hand_over", hand_over)
    docs = [{"id": str(i), "text": "t", "timestamp": T0 + i} for i in range(2000)]
    summary = replay_producer.replay_documents(docs, kafka_bootstrap, topic_name, rate=200)
    assert summary.interrupted and sent
    on_topic = consume_values(kafka_bootstrap, topic_name)
    assert 30 <= len(on_topic) == summary.produced == summary.resume_skip < 2000
    monkeypatch.setattr(replay_producer, "_hand_over", real)
    rest = replay_producer.replay_documents(docs, kafka_bootstrap, topic_name, skip=len(on_topic))
    assert rest.produced + len(on_topic) == 2000
    assert sorted(int(v["id"]) for v in consume_values(kafka_bootstrap, topic_name)) == list(
        range(2000)
    )
