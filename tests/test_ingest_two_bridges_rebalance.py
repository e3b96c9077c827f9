"""``sparsewatch ingest`` with two bridges in one consumer group (instances 0 and 1) while
records keep arriving: a second bridge joining and then leaving rebalances the source's
partitions twice, and every record is still forwarded or dead-lettered exactly once (read
committed), each stream in the source's order (consumers/ingest.py, against a real broker)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from sparsewatch.consumers.ingest import run_ingest
from sparsewatch.consumers.messages import parse_document
from sparsewatch.consumers.retry import StopFlag

from tests.support.ingest_kafka import (
    TWEETS,
    committed,
    create,
    make_route,
    read_all,
    tweet_records,
)


def _assigned_members(bootstrap: str, group: str) -> int:
    """How many members of ``group`` have partitions assigned."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(10)
    return sum(bool(m.assignment.topic_partitions) for m in description.members)


def test_two_bridges_in_one_group_deliver_every_record_once_across_rebalances(
    kafka_bootstrap: str, topic_name: str
) -> None:
    route = make_route(kafka_bootstrap, topic_name)
    source = route.source_topics[0]
    create(kafka_bootstrap, source, 6)
    create(kafka_bootstrap, route.docs_topic, 4)
    create(kafka_bootstrap, route.dlq_topic, 1)
    langs = ("en", "de", "fr", "es", "it", "pt")
    records, good, bad = tweet_records(
        [(langs[i % len(langs)], i % 97 == 0) for i in range(12_000)]
    )

    def feed() -> None:
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
        for start in range(0, len(records), 300):
            for key, value in records[start : start + 300]:
                producer.produce(source, key=key, value=value)
            assert producer.flush(30) == 0
            time.sleep(0.3)

    outs: list[dict] = [{}, {}]
    stops = [StopFlag(), StopFlag()]

    def bridge(n: int, until_idle_s: float | None) -> threading.Thread:
        def run() -> None:
            try:
                outs[n]["stats"] = run_ingest(
                    replace(route, instance=n),
                    TWEETS,
                    stops[n],
                    until_idle_s=until_idle_s,
                    batch_size=100,
                )
            except Exception as exc:  # reported below
                outs[n]["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    feeder = threading.Thread(target=feed)
    feeder.start()
    first = bridge(0, None)
    try:
        deadline = time.monotonic() + 120
        while committed(kafka_bootstrap, route.group_id, source, 6) < 2_000:
            assert first.is_alive() and time.monotonic() < deadline, outs
            time.sleep(0.05)
        second = bridge(1, None)  # joins: partitions move to it
        while _assigned_members(kafka_bootstrap, route.group_id) < 2:
            assert first.is_alive() and second.is_alive(), outs
            assert time.monotonic() < deadline + 60, "the second bridge got no partitions"
            time.sleep(0.2)
        before = committed(kafka_bootstrap, route.group_id, source, 6)
        while committed(kafka_bootstrap, route.group_id, source, 6) < before + 1_500:
            assert first.is_alive() and second.is_alive(), outs
            assert time.monotonic() < deadline + 120, outs
            time.sleep(0.05)
        stops[1].request()  # leaves: its partitions go back to the first
        second.join(90)
        assert not second.is_alive() and "error" not in outs[1], outs
    finally:
        feeder.join()
    deadline = time.monotonic() + 180
    while committed(kafka_bootstrap, route.group_id, source, 6) < len(records):
        assert first.is_alive() and time.monotonic() < deadline, outs
        time.sleep(0.2)
    stops[0].request()
    first.join(90)
    assert not first.is_alive() and "error" not in outs[0], outs

    docs = read_all(kafka_bootstrap, route.docs_topic, len(good))
    ids = [parse_document(m.value(), 100_000).id for m in docs]
    assert len(ids) == len(set(ids)) == len(good)
    for lang in langs:
        want = [t["id_str"] for t in good if t["user"]["lang"] == lang]
        got = [parse_document(m.value(), 100_000).id for m in docs if m.key() == lang.encode()]
        assert got == want
    dead = read_all(kafka_bootstrap, route.dlq_topic, len(bad))
    assert sorted(m.value() for m in dead) == sorted(bad)
    forwarded = [out["stats"].forwarded for out in outs]
    assert forwarded[1] > 0  # the second bridge did take partitions over
    assert sum(forwarded) == len(good)
