"""``sparsewatch status`` after a real detector run (real broker; SQLite and PostgreSQL): what
each stream has stored, and per partition how many messages the database does not hold yet."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from sparsewatch.runner import build_worker, run_loops
from tests.support.cli import run_cli
from tests.support.pipeline_kafka import FIXED_DICTIONARY, pipeline_env, produce, streams

pytestmark = [pytest.mark.kafka]


def status(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    return run_cli(monkeypatch, capsys, "status", *args)


def test_status_counts_what_is_stored_and_what_is_not_yet(
    kafka_bootstrap, database_url, monkeypatch, capsys
):
    prefix = f"status-{uuid.uuid4().hex[:8]}"
    env = pipeline_env(kafka_bootstrap, prefix, database_url, **FIXED_DICTIONARY)
    env["SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S"] = "2"
    config = load_config(env=env)
    for name, value in env.items():  # the command reads the same configuration
        monkeypatch.setenv(name, value)
    docs = streams(600)
    n_bad = produce(kafka_bootstrap, config.kafka.topic("docs"), docs, bad_every=50)
    store = Store.open(database_url)
    try:
        run_loops([build_worker("detector", config, store)], [6.0], install_signals=False)
        windows = store.windows(limit=None)
        stored = store.documents(limit=None)
    finally:
        store.dispose()
    assert len(stored) == len(docs)
    # Sent after the worker stopped: on the broker, not in the database.
    extra = streams(7)
    for d in extra:
        d["id"] = f"late-{d['id']}"
    produce(kafka_bootstrap, config.kafka.topic("docs"), extra)

    args = ("--database-url", database_url, "--bootstrap-servers", kafka_bootstrap)
    code, out, err = status(monkeypatch, capsys, *args, "--format", "json")
    assert code == 0 and err == "", err
    result = json.loads(out)
    assert result["kafka"] == "ok" and result["dead_letters"] == n_bad
    by_stream = {s["stream"]: s for s in result["streams"]}
    assert set(by_stream) == {"alpha", "beta"}
    for name, s in by_stream.items():
        mine = [d for d in stored if d["stream"] == name]
        assert s["documents"] == len(mine) == 600
        assert s["novel"] == sum(bool(d["novel"]) for d in mine) > 0
        assert s["late"] == sum(bool(d["late"]) for d in mine)
        assert s["windows"] == sum(w["stream"] == name for w in windows)
        assert s["last_window"] == max(w["window_seq"] for w in windows if w["stream"] == name)
        assert s["alerts"]["novel_document"] == s["novel"]
        assert list(s["checkpoints"]) == [f"{config.kafka.group_id}.detector"]
    detector, anomaly = f"{config.kafka.group_id}.detector", f"{config.kafka.group_id}.anomaly"
    offsets = [o for o in result["offsets"] if o["group_id"] == detector]
    assert {(o["topic"], o["partition"]) for o in offsets} == {
        (config.kafka.topic("docs"), p) for p in (0, 1)
    }
    # every message read is stored (the streams went quiet and were checkpointed), so what the
    # database does not hold is exactly the 14 documents sent afterwards
    assert sum(o["not_stored"] for o in offsets) == len(extra)
    assert all(o["end_offset"] - (o["next_offset"] or 0) == o["not_stored"] for o in offsets)
    # the anomaly worker never ran: every scores message is still to be stored, partition by
    # partition, though it has stored no offset
    scores = [o for o in result["offsets"] if o["group_id"] == anomaly]
    assert {o["topic"] for o in scores} == {config.kafka.topic("scores")} and scores
    assert all(o["next_offset"] is None and o["not_stored"] == o["end_offset"] for o in scores)
    assert sum(o["not_stored"] for o in scores) >= len(docs)
    assert {o["group_id"] for o in result["offsets"]} == {detector, anomaly}

    code, out, err = status(monkeypatch, capsys, *args, "--stream", "beta")
    assert code == 0 and err == ""
    assert "streams (1)\nbeta\n" in out and "alpha" not in out.split("partitions (")[0]
    assert "documents: 600," in out and f"dead letters: {n_bad}" in out

    # No broker: the database part, and a note instead of the end offsets.
    code, out, err = status(monkeypatch, capsys, "--database-url", database_url,
                            "--bootstrap-servers", "127.0.0.1:1", "--kafka-timeout", "1",
                            "--format", "json")  # fmt: skip
    assert code == 0 and err == ""
    result = json.loads(out)
    assert result["kafka"].startswith("Kafka at 127.0.0.1:1 did not answer")
    assert all(o["end_offset"] is None and o["not_stored"] is None for o in result["offsets"])
    assert {o["group_id"] for o in result["offsets"]} == {detector}  # only what was stored
    assert len(result["streams"]) == 2
    code, out, err = status(monkeypatch, capsys, "--database-url", database_url, "--no-kafka",
                            "--format", "json")  # fmt: skip
    assert code == 0 and json.loads(out)["kafka"] == "not asked"


def test_status_of_a_database_without_windows(database_url, monkeypatch, capsys):
    Store.open(database_url).dispose()  # set up, nothing written
    code, out, err = status(monkeypatch, capsys, "--database-url", database_url, "--no-kafka")
    assert code == 0 and err == ""
    assert "streams (0)\n  none yet: no window has been stored\n" in out
    assert "partitions (0)" in out and "dead letters: 0" in out
    code, out, err = status(monkeypatch, capsys, "--database-url", database_url, "--no-kafka",
                            "--stream", "x")  # fmt: skip
    assert code == 0 and "streams (0)\n  none of those\n" in out


def test_status_counts_alerts_stored_and_not_yet_sent(database_url, monkeypatch, capsys):
    """Alerts a crash left between the commit and the alerts topic (the writer's outbox)."""
    alert = {"stream": "s", "score": 1.0, "window_seq": 1, "event_time": None, "summary": ""}
    with Store.open(database_url) as store, store.transaction() as tx:
        tx.insert_alerts([{**alert, "kind": "anomaly", "subject_id": "sent"}])
        pending = [{**alert, "kind": "anomaly", "subject_id": f"d{i}"} for i in range(3)]
        tx.insert_alerts(pending, publish_to="p.alerts")
    args = ("--database-url", database_url, "--no-kafka")
    code, out, err = status(monkeypatch, capsys, *args)
    assert code == 0 and err == ""
    assert "alerts stored and not yet sent to the alerts topic: 3 (" in out
    code, out, _ = status(monkeypatch, capsys, *args, "--format", "json")
    assert code == 0 and json.loads(out)["unsent_alerts"] == 3


def test_status_marks_a_stream_whose_event_times_look_like_epoch_seconds(
    database_url, monkeypatch, capsys
):
    start = datetime.fromtimestamp(1_767_225_600 / 1000, tz=UTC)  # 2026 in seconds, read as ms
    with Store.open(database_url) as store, store.transaction() as tx:
        tx.upsert_window("secs", 0, start, start + timedelta(hours=1), 3, None, {}, "idle")
        tx.upsert_window("ms", 0, datetime(2026, 1, 1, tzinfo=UTC),
                         datetime(2026, 1, 1, 1, tzinfo=UTC), 3, None, {}, "idle")  # fmt: skip
    code, out, err = status(monkeypatch, capsys, "--database-url", database_url, "--no-kafka")
    assert code == 0 and err == ""
    lines = out.splitlines()
    secs, ms = lines.index("secs"), lines.index("ms")
    assert lines[secs + 1] == (
        "  windows: 1, the last ending 1970-01-21 11:53:45 (event time; epoch seconds sent as "
        "milliseconds?)"
    )
    assert lines[ms + 1] == "  windows: 1, the last ending 2026-01-01 01:00:00 (event time)"
    args = ("--database-url", database_url, "--no-kafka", "--format", "json")
    code, out, err = status(monkeypatch, capsys, *args)  # the JSON had no such mark
    marks = {s["stream"]: s["epoch_seconds_as_ms"] for s in json.loads(out)["streams"]}
    assert code == 0 and marks == {"secs": True, "ms": False}


def test_status_shows_what_the_ingest_bridge_has_not_forwarded(
    kafka_bootstrap, tmp_path, monkeypatch, capsys
):
    from sparsewatch.consumers.ingest import IngestRoute, run_ingest
    from sparsewatch.consumers.retry import StopFlag

    from tests.support.ingest_kafka import TWEETS, create, make_tweet
    from tests.support.ingest_kafka import produce as produce_raw

    group = f"status-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("SPARSEWATCH_KAFKA_GROUP_ID", group)
    monkeypatch.setenv("SPARSEWATCH_KAFKA_TOPIC_PREFIX", group)
    url = f"sqlite:///{tmp_path / 'status.db'}"
    Store.open(url).dispose()
    source = f"{group}.tweets"
    create(kafka_bootstrap, source, 3)
    tweets = [(b"en", json.dumps(make_tweet(i, "en")).encode()) for i in range(129)]
    produce_raw(kafka_bootstrap, source, tweets[:120])
    route = IngestRoute(
        kafka_bootstrap, f"{group}.ingest", (source,), f"{group}.docs", f"{group}.dlq"
    )
    assert run_ingest(route, TWEETS, StopFlag(), until_idle_s=3.0).forwarded == 120
    produce_raw(kafka_bootstrap, source, tweets[120:])  # after the bridge stopped

    args = ("--database-url", url, "--bootstrap-servers", kafka_bootstrap)
    code, out, err = status(monkeypatch, capsys, *args, "--format", "json")
    assert code == 0 and err == "", err
    rows = json.loads(out)["ingest"]
    assert {(r["group_id"], r["topic"]) for r in rows} == {(f"{group}.ingest", source)}
    assert sum(r["committed_offset"] for r in rows) == 120
    assert sum(r["not_forwarded"] for r in rows) == 9
    assert all(r["end_offset"] - r["committed_offset"] == r["not_forwarded"] for r in rows)
    code, out, err = status(monkeypatch, capsys, *args)
    assert code == 0 and "ingest bridge" in out and source in out
    monkeypatch.setenv("SPARSEWATCH_KAFKA_GROUP_ID", f"{group}-never")  # a bridge never run
    code, out, err = status(monkeypatch, capsys, *args, "--format", "json")
    assert code == 0 and json.loads(out)["ingest"] == []


def test_transaction_markers_are_not_counted_as_unstored(
    kafka_bootstrap, tmp_path, monkeypatch, capsys
):
    """A transactional producer (the ingest bridge) leaves one marker offset per transaction:
    a caught-up worker showed "1 not stored" per partition for ever."""
    from confluent_kafka import Producer

    url = f"sqlite:///{tmp_path / 'tx.db'}"
    prefix = f"status-tx-{uuid.uuid4().hex[:8]}"
    env = pipeline_env(
        kafka_bootstrap, prefix, url, SPARSEWATCH_ANOMALY_ENABLED="false", **FIXED_DICTIONARY
    )
    env["SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S"] = "1"
    config = load_config(env=env)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 2})
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{prefix}-tx"})
    producer.init_transactions(30)

    def in_a_transaction(docs: list[dict]) -> None:
        producer.begin_transaction()
        for doc in docs:
            producer.produce(topic, key=doc["stream"].encode(), value=json.dumps(doc).encode())
        producer.commit_transaction(30)

    docs = streams(150)
    for start in range(0, len(docs), 100):  # three transactions
        in_a_transaction(docs[start : start + 100])
    store = Store.open(url)
    try:
        run_loops([build_worker("detector", config, store)], [4.0], install_signals=False)
        assert len(store.documents(limit=None)) == len(docs)
    finally:
        store.dispose()
    args = ("--database-url", url, "--bootstrap-servers", kafka_bootstrap, "--format", "json")
    code, out, err = status(monkeypatch, capsys, *args)
    assert code == 0, err
    mine = [o for o in json.loads(out)["offsets"] if o["topic"] == topic]
    assert mine and all(o["not_stored"] == 0 for o in mine)
    assert sum(o["end_offset"] - o["next_offset"] for o in mine) > 0  # the markers
    in_a_transaction(streams(4))  # sent after the worker stopped: 8 documents, one marker each
    code, out, err = status(monkeypatch, capsys, *args)
    mine = [o for o in json.loads(out)["offsets"] if o["topic"] == topic]
    assert code == 0 and sum(o["not_stored"] for o in mine) == 8
