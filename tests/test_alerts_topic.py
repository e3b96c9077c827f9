"""Every committed alert is published to ``<prefix>.alerts`` (``kafka.publish_alerts``), against a
real broker and SQLite: the detector's and the anomaly worker's alerts, one message each, keyed by
stream, with the natural key in an ``alert_key`` header and the stored row's fields as JSON; none
and no topic when publishing is off; cut to fit an alerts topic of small ``max.message.bytes``,
with a ``truncated`` header, every window still committed."""

from __future__ import annotations

import json
import math
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka import Message
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.writer import Destination, WriteJob, alert_key, make_writer
from sparsewatch.replay.producer import replay_documents
from sparsewatch.storage.schema import alerts
from sparsewatch.storage.store import Store

from sparsewatch.config import Config, load_config
from sparsewatch.runner import build_worker, run_loops
from tests.support.kafka_topics import consume_messages, topic_exists
from tests.support.pipeline_kafka import FIXED_DICTIONARY, pipeline_env, stored_scores, streams
from tests.support.writer_jobs import T0

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# Alert fields compared exactly (the score within 1e-9; event_time as a datetime).
_EXACT = ("kind", "stream", "subject_id", "window_seq", "summary", "terms", "n_documents")
_FIELDS = (*_EXACT, "score", "event_time", "related_ids")


def _config(bootstrap: str, tmp_path: Path, name: str, **extra: str) -> Config:
    """Fresh topics and a SQLite file; hour windows of about 120 documents, so both workers raise
    alerts within a few hundred documents per stream."""
    url = f"sqlite:///{tmp_path / f'{name}.db'}"
    extra = {"SPARSEWATCH_WINDOWS_SIZE": "1h", **FIXED_DICTIONARY, **extra}
    return load_config(env=pipeline_env(bootstrap, f"{name}-{uuid.uuid4().hex[:8]}", url, **extra))


def _run(bootstrap: str, config: Config, docs: list[dict], roles: tuple[str, ...]) -> list[dict]:
    """``docs`` and end-of-stream markers through the workers ``roles`` until drained; the stored
    alerts (every field), after the documents were all stored."""
    topic = config.kafka.topic("docs")
    ensure_topics(bootstrap, {topic: config.kafka.partitions})
    assert replay_documents(docs, bootstrap, topic, end_of_stream=True).produced == len(docs)
    store = Store.open(config.resolved_database_url)
    try:
        workers = [build_worker(role, config, store) for role in roles]
        run_loops(workers, [2.0] * len(workers), install_signals=False)
        assert len(stored_scores(store)) == len(docs)  # every window committed
        with store.reading() as conn:
            rows = [dict(r._mapping) for r in conn.execute(sa.select(alerts))]
    finally:
        store.dispose()
    return rows


def _natural_key(row: dict[str, Any]) -> str:
    return json.dumps([row["kind"], row["stream"], row["subject_id"]], separators=(",", ":"))


def _by_key(messages: list[Message]) -> dict[str, tuple[Message, dict[str, Any]]]:
    """The messages by their ``alert_key`` header (each key once), with their JSON value."""
    found = {dict(m.headers())["alert_key"].decode(): (m, json.loads(m.value())) for m in messages}
    assert len(found) == len(messages)
    return found


def _assert_same(sent: dict[str, Any], row: dict[str, Any], cut: frozenset[str]) -> None:
    """The message's fields are the stored row's, but for those ``cut``."""
    assert set(sent) == set(_FIELDS)
    for name in _EXACT:
        if name not in cut:
            assert sent[name] == row[name], name
    if math.isfinite(row["score"]):
        assert abs(sent["score"] - row["score"]) <= 1e-9
    else:
        assert sent["score"] is None
    event_time = sent["event_time"]
    assert event_time is None or event_time.endswith("Z")
    parsed = None if event_time is None else datetime.fromisoformat(event_time)
    assert parsed == row["event_time"]
    assert sent["related_ids"] == (None if "related_ids" in cut else row["related_ids"])


def test_every_stored_alert_is_published_once_keyed_by_stream(kafka_bootstrap, tmp_path):
    """Both workers' alerts: the messages' alert_key headers are the stored alerts' natural keys,
    one message each, its value the stored row, its key the stream, one partition per stream."""
    config = _config(kafka_bootstrap, tmp_path, "alerts")
    rows = _run(kafka_bootstrap, config, streams(600), ("detector", "anomaly"))
    assert {row["kind"] for row in rows} == {"novel_document", "emerging_topic", "anomaly"}
    messages = consume_messages(kafka_bootstrap, config.kafka.topic("alerts"))
    sent = _by_key(messages)
    assert set(sent) == {_natural_key(row) for row in rows}
    for row in rows:
        message, value = sent[_natural_key(row)]
        assert message.key() == row["stream"].encode()
        assert "truncated" not in dict(message.headers())
        _assert_same(value, row, frozenset())
    partitions = {(m.key(), m.partition()) for m in messages}
    assert len(partitions) == len({m.key() for m in messages})


def test_no_alerts_topic_when_publishing_is_off(kafka_bootstrap, tmp_path):
    """``kafka.publish_alerts = false``: alerts are stored, the topic is neither created nor
    written."""
    config = _config(
        kafka_bootstrap, tmp_path, "noalerts", SPARSEWATCH_KAFKA_PUBLISH_ALERTS="false"
    )
    rows = _run(kafka_bootstrap, config, streams(400), ("detector",))
    assert rows
    assert not topic_exists(kafka_bootstrap, config.kafka.topic("alerts"))


def _lost(message: Message) -> frozenset[str]:
    """The fields a message's ``truncated`` header says it lost."""
    said = dict(message.headers()).get("truncated")
    return frozenset(said.decode().split(",")) if said else frozenset()


def _assert_cut_as_said(sent: dict[str, Any], row: dict[str, Any], lost: frozenset[str]) -> None:
    """What a cut message keeps is the row's; its summary, if cut, a start of the row's."""
    _assert_same(sent, row, lost)
    assert lost <= {"related_ids", "summary", "terms"}
    if "related_ids" in lost:
        assert row["related_ids"] and sent["n_documents"] == row["n_documents"]
    if "summary" in lost:
        assert sent["summary"] != row["summary"]
        assert row["summary"].startswith(sent["summary"].removesuffix("…"))
    if "terms" in lost:
        assert sent["terms"] is None


def test_a_small_alerts_topic_gets_cut_alerts_and_every_window_commits(kafka_bootstrap, tmp_path):
    """An alerts topic created beforehand with max.message.bytes 2,000 and documents with ids of
    500 characters: a story's alert (its related ids) outgrows the topic; it is published
    without them, with a ``truncated`` header, and every document and window is still stored."""
    config = _config(
        kafka_bootstrap, tmp_path, "cutalerts", SPARSEWATCH_DETECTOR_NOVEL_SIMILARITY="0.1"
    )
    topic = config.kafka.topic("alerts")
    ensure_topics(kafka_bootstrap, {topic: 2}, **{"max.message.bytes": "2000"})
    docs = [{**d, "id": d["id"].rjust(500, "x")} for d in streams(600)]
    rows = _run(kafka_bootstrap, config, docs, ("detector", "anomaly"))
    sent = _by_key(consume_messages(kafka_bootstrap, topic))
    assert set(sent) == {_natural_key(row) for row in rows}
    cut = []
    for row in rows:
        message, value = sent[_natural_key(row)]
        assert message.key() == row["stream"].encode()
        assert len(message.value()) <= 2000
        _assert_cut_as_said(value, row, _lost(message))
        cut += [_lost(message)]
    assert frozenset({"related_ids"}) in cut and frozenset() in cut


def _alert(subject: str, **fields: Any) -> dict[str, Any]:
    """An ``insert_alerts`` row of stream ``s``."""
    row = {
        "kind": "novel_document",
        "stream": "s",
        "subject_id": subject,
        "score": 0.75,
        "window_seq": 3,
        "event_time": T0,
        "summary": "a short summary",
        "terms": [["alpha", 0.5], ["beta", 0.25]],
        "n_documents": 1,
        "related_ids": [],
    }
    return {**row, **fields}


def test_the_writer_cuts_alerts_to_the_topic_and_never_fails_the_job(
    kafka_bootstrap, tmp_path, caplog
):
    """A job's alerts against an alerts topic of 1,200 bytes: a story of 100 related ids of 512
    characters loses them (its document count stays), a long summary is shortened, then terms
    dropped, in that order, each said in a ``truncated`` header; one whose subject alone outgrows
    the topic is logged and not published. The job commits every alert; a non-finite score and a
    missing event time are JSON nulls."""
    url = f"sqlite:///{tmp_path / 'writer.db'}"
    prefix = f"cutwriter-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.alerts"
    ensure_topics(kafka_bootstrap, {f"{prefix}.scores": 1, f"{prefix}.dlq": 1})
    ensure_topics(kafka_bootstrap, {topic: 1}, **{"max.message.bytes": "1200"})
    destination = Destination(
        kafka_bootstrap, "g", f"{prefix}.docs", f"{prefix}.scores", f"{prefix}.dlq", topic
    )
    related = [f"{i:03d}".rjust(512, "r") for i in range(100)]
    many_terms = [[f"term{i}".rjust(40, "t"), 0.01] for i in range(40)]
    rows = [
        _alert(
            "fits",
            kind="anomaly",
            score=float("inf"),
            event_time=None,
            terms=None,
            n_documents=None,
            related_ids=None,
        ),
        _alert("story", n_documents=101, related_ids=related),
        _alert("long", summary="word " * 400),
        _alert("story-long", n_documents=101, related_ids=related, summary="wörd " * 400),
        _alert("terms", summary="x" * 300, terms=many_terms),
        _alert("é" * 512),
    ]
    store = Store.open(url)
    try:
        writer = make_writer("thread", store, destination, "cut")
        try:
            writer.submit(WriteJob(calls=[("insert_alerts", (rows,))])).result()
        finally:
            writer.close()
        with store.reading() as conn:
            stored = {r.subject_id: dict(r._mapping) for r in conn.execute(sa.select(alerts))}
    finally:
        store.dispose()
    assert set(stored) == {row["subject_id"] for row in rows}
    messages = consume_messages(kafka_bootstrap, topic)
    sent = {json.loads(m.value())["subject_id"]: m for m in messages}
    assert {subject: _lost(m) for subject, m in sent.items()} == {
        "fits": frozenset(),
        "story": frozenset({"related_ids"}),
        "long": frozenset({"summary"}),
        "story-long": frozenset({"related_ids", "summary"}),
        "terms": frozenset({"summary", "terms"}),
    }
    for subject, message in sent.items():
        value = json.loads(message.value())
        row = stored[subject]
        _assert_cut_as_said(value, row, _lost(message))
        assert json.loads(dict(message.headers())["alert_key"]) == [row["kind"], "s", subject]
    assert stored["fits"]["score"] == math.inf
    assert json.loads(sent["fits"].value())["score"] is None
    assert json.loads(sent["long"].value())["summary"].startswith("word word")
    assert json.loads(sent["story-long"].value())["n_documents"] == 101
    assert "not published" in caplog.text and topic in caplog.text


def test_alert_keys_of_distinct_alerts_differ_whatever_their_characters():
    """A key joined with "/" made ("anomaly", "a/b", "c") and ("anomaly", "a", "b/c") one key."""
    first = {"kind": "anomaly", "stream": "a/b", "subject_id": "c"}
    second = {"kind": "anomaly", "stream": "a", "subject_id": "b/c"}
    assert alert_key(first) != alert_key(second)
    assert json.loads(alert_key({**first, "stream": 'ü"\n'})) == ["anomaly", 'ü"\n', "c"]
