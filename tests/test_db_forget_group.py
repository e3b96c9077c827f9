"""``sparsewatch db forget-group`` (``Store.forget_group``): a consumer group no longer used is
forgotten in the database (checkpoints, resume offsets) and on a real broker; results stay; a live
group, a misspelt one and an unreachable broker are one-line errors that delete nothing."""

from __future__ import annotations

import json
import time
import uuid

import numpy as np
import pytest
from confluent_kafka import Consumer, TopicPartition
from sparsewatch.consumers.kafka_admin import consumer_group_members, ensure_topics
from sparsewatch.storage.store import Store

from tests.support.cli import run_cli
from tests.support.storage import dump, write_window

GROUP_STATE = ("checkpoints", "partition_offsets")


def _state_of(snapshot: dict, group: str) -> dict[str, list]:
    return {t: [r for r in snapshot[t] if r[0] == group] for t in GROUP_STATE}


def _two_groups(store: Store) -> None:
    """Results of two windows (the ``detector`` group's state, as a worker writes it) plus a
    second group with a checkpoint for two streams and offsets on two partitions."""
    write_window(store, 0, n=10)
    write_window(store, 1, n=10)
    with store.transaction() as tx:
        for stream in ("news", "tweets"):
            tx.put_checkpoint("old.anomaly", stream, {"x": np.arange(3.0)}, {"window": 1})
        tx.set_partition_offsets("old.anomaly", "scores", {0: 40, 1: 2})


def test_forget_group_deletes_its_state_only(database_url):
    with Store.open(database_url) as store:
        _two_groups(store)
        assert store.groups() == ["detector", "old.anomaly"]
        before = dump(store)
        dry = store.forget_group("old.anomaly", dry_run=True)
        assert dry == {"checkpoints": 2, "partition_offsets": 2}
        assert dump(store) == before  # a dry run deletes nothing
        assert store.forget_group("old.anomaly") == dry
        after = dump(store)
        assert _state_of(after, "old.anomaly") == {t: [] for t in GROUP_STATE}
        # the other group's state and every result stay as they were
        assert _state_of(after, "detector") == _state_of(before, "detector")
        for table, rows in before.items():
            if table not in GROUP_STATE:
                assert after[table] == rows, table
        assert store.groups() == ["detector"]
        assert store.forget_group("old.anomaly") == {"checkpoints": 0, "partition_offsets": 0}


def _committed_group(bootstrap: str, topic: str, group: str) -> None:
    """A group that committed an offset on ``topic`` and left (no members)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()


@pytest.fixture
def database(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    with Store.open(url) as store:
        _two_groups(store)
    return url


def test_cli_forgets_in_the_database_and_on_the_broker(
    monkeypatch, capsys, kafka_bootstrap, topic_name, database
):
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    _committed_group(kafka_bootstrap, topic_name, "old.anomaly")
    assert consumer_group_members(kafka_bootstrap, "old.anomaly", 10) == 0
    base = ("db", "forget-group", "--database-url", database, "--bootstrap-servers")
    code, out, err = run_cli(
        monkeypatch, capsys, *base, kafka_bootstrap, "old.anomaly", "--dry-run"
    )
    assert (code, err) == (0, "")
    assert out == (
        "would forget old.anomaly: 2 checkpoints, 2 resume offsets; would delete it on the broker\n"
    )
    assert consumer_group_members(kafka_bootstrap, "old.anomaly", 10) == 0  # still there
    with Store.open(database) as store:
        before = dump(store)
    code, out, err = run_cli(monkeypatch, capsys, *base, kafka_bootstrap, "old.anomaly", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "dry_run": False,
        "groups": {"old.anomaly": {"checkpoints": 2, "partition_offsets": 2, "broker": "deleted"}},
    }
    assert consumer_group_members(kafka_bootstrap, "old.anomaly", 10) is None
    with Store.open(database) as store:
        after = dump(store)
        assert store.groups() == ["detector"]
    assert _state_of(after, "old.anomaly") == {t: [] for t in GROUP_STATE}
    assert _state_of(after, "detector") == _state_of(before, "detector")
    # status no longer lists it
    code, out, err = run_cli(
        monkeypatch, capsys, "status", "--database-url", database, "--no-kafka"
    )
    assert code == 0 and "old.anomaly" not in out and "detector" in out
    # a group only the database knows (never on this broker) is forgotten there
    code, out, err = run_cli(monkeypatch, capsys, *base, kafka_bootstrap, "detector")
    assert (code, err) == (0, "")
    assert out == "forgot detector: 1 checkpoints, 2 resume offsets; no such group on the broker\n"


def test_cli_refuses_a_live_group_and_deletes_nothing(
    monkeypatch, capsys, kafka_bootstrap, topic_name, database
):
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    group = "old.anomaly"
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group, "session.timeout.ms": 6000}
    )
    consumer.subscribe([topic_name])
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
        with Store.open(database) as store:
            before = dump(store)
        for extra in ((), ("--dry-run",)):
            code, out, err = run_cli(
                monkeypatch,
                capsys,
                *("db", "forget-group", "--database-url", database),
                *("--bootstrap-servers", kafka_bootstrap, "detector", group, *extra),
            )
            assert code == 2 and out == ""
            assert err.count("\n") == 1 and "Traceback" not in err
            assert f"consumer group '{group}' has members on the broker" in err
            with Store.open(database) as store:
                assert dump(store) == before  # neither group was forgotten
        assert consumer_group_members(kafka_bootstrap, group, 10) == 1
    finally:
        consumer.close()


def test_cli_unknown_group_and_unreachable_broker_are_one_line(
    monkeypatch, capsys, kafka_bootstrap, database
):
    with Store.open(database) as store:
        before = dump(store)
    missing = f"no-such-{uuid.uuid4().hex[:8]}"
    base = ("db", "forget-group", "--database-url", database)
    code, out, err = run_cli(
        monkeypatch, capsys, *base, "--bootstrap-servers", kafka_bootstrap, "detector", missing
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert f"no consumer group '{missing}' in the database or on the broker" in err
    assert "the database keeps state for: detector, old.anomaly" in err
    code, out, err = run_cli(monkeypatch, capsys, *base, "--no-kafka", missing)
    assert code == 2 and f"no consumer group '{missing}' in the database (" in err
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        *base,
        *("--bootstrap-servers", "127.0.0.1:1", "--kafka-timeout", "0.5", "old.anomaly"),
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "cannot reach Kafka at 127.0.0.1:1" in err and "--no-kafka" in err
    with Store.open(database) as store:
        assert dump(store) == before
    # --no-kafka: the database only
    code, out, err = run_cli(monkeypatch, capsys, *base, "--no-kafka", "old.anomaly")
    assert (code, err) == (0, "")
    assert out == (
        "forgot old.anomaly: 2 checkpoints, 2 resume offsets; the broker was not asked "
        "(--no-kafka)\n"
    )
    code, _, err = run_cli(monkeypatch, capsys, *base, "--no-kafka")
    assert code == 2 and "Missing argument 'GROUPS...'" in err
