"""The ingest bridge's dead letters keep the refused record's own key and tell a tombstone (a
null value) from an empty message, on a real broker.

Before, a dead letter's key was only the record's coordinates (``topic:partition:offset``): the
record's key was dropped, and a tombstone's copy was an empty value like an empty message's, so
only the reason's wording told them apart. Now the key goes to a ``source_key`` header (none for
a record without a key; cut at ``DLQ_MAX_KEY_BYTES``, with its size, so that a copy still fits
the smallest dead-letter topic allowed) and a tombstone's copy has a ``null_value`` header."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Message
from sparsewatch.consumers.ingest import run_ingest
from sparsewatch.consumers.kafka_admin import MIN_DEAD_LETTER_TOPIC_BYTES, ensure_topics
from sparsewatch.consumers.kafka_client import DLQ_MAX_KEY_BYTES
from sparsewatch.consumers.retry import StopFlag
from sparsewatch.storage.store import Store

from tests.support.ingest_kafka import (
    TWEETS,
    create,
    dead_letter_source,
    make_route,
    make_tweet,
    prepare,
    produce,
    read_all,
)

pytestmark = pytest.mark.kafka


def _by_offset(dead: list[Message]) -> dict[int, tuple[bytes | None, dict[str, bytes]]]:
    """Each dead letter's value and headers, by its source record's offset."""
    return {dead_letter_source(m)[2]: (m.value(), dict(m.headers() or [])) for m in dead}


def test_a_dead_letter_keeps_the_key_and_tells_a_tombstone_from_an_empty_message(
    kafka_bootstrap: str, topic_name: str, database_url: str
) -> None:
    """A tombstone and an empty message (both keyed), a record without a key and one with a
    binary key: each dead letter carries the record's key as it was (no ``source_key`` header
    for none), and only the tombstone's has ``null_value``; the value of both is empty, and the
    database keeps them as before (empty payloads, told apart by their reasons)."""
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route, source_partitions=1)
    binary_key = bytes(range(256))
    records: list[tuple[bytes | None, bytes | None]] = [
        (b"en", json.dumps(make_tweet(0, "en")).encode()),
        (b"gone-1", None),  # offset 1: a tombstone
        (b"empty-2", b""),  # offset 2: an empty message
        (None, b"{not json"),  # offset 3: no key
        (binary_key, b"[1, 2]"),  # offset 4
        (b"", b"{also not json"),  # offset 5: an empty key, not none
    ]
    produce(kafka_bootstrap, route.source_topics[0], records)
    store = Store.open(database_url)
    try:
        stats = run_ingest(
            route,
            TWEETS,
            StopFlag(),
            until_idle_s=2.0,
            record_dead_letters=store.insert_dead_letters,
        )
        stored = {row["offset"]: row for row in store.dead_letters(limit=None)}
    finally:
        store.dispose()
    assert (stats.read, stats.forwarded, stats.dead_lettered) == (6, 1, 5)

    dead = _by_offset(read_all(kafka_bootstrap, route.dlq_topic, 5))
    assert sorted(dead) == [1, 2, 3, 4, 5]
    tombstone_value, tombstone = dead[1]
    assert tombstone_value == b""
    assert tombstone["source_key"] == b"gone-1"
    assert tombstone["null_value"] == b"true"
    assert tombstone["reason"] == b"null value (a tombstone), not a document"
    empty_value, empty = dead[2]
    assert empty_value == b""
    assert empty["source_key"] == b"empty-2"
    assert "null_value" not in empty
    assert "source_key" not in dead[3][1]
    assert dead[4][1]["source_key"] == binary_key
    assert dead[5][1]["source_key"] == b""
    assert not any("null_value" in headers for offset, (_, headers) in dead.items() if offset != 1)
    assert not any("source_key_truncated_from_bytes" in headers for _, headers in dead.values())
    # the table is unchanged: no key column, an empty payload for a null value
    assert stored[1]["payload"] == stored[2]["payload"] == b""
    assert stored[1]["reason"] != stored[2]["reason"]


def test_a_long_key_is_cut_so_that_the_copy_fits_the_smallest_dead_letter_topic(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """A record of a 3,000-byte key and a 20,000-byte value the mapping refuses, dead-lettered to
    a topic of the smallest size allowed (4,096 bytes): the copy keeps the key's first
    ``DLQ_MAX_KEY_BYTES`` bytes with its size, and the value's start with its size, and the
    broker takes it (the batch commits, the bridge goes on to the next record)."""
    route = make_route(kafka_bootstrap, topic_name)
    create(kafka_bootstrap, route.source_topics[0], 1)
    create(kafka_bootstrap, route.docs_topic, 1)
    ensure_topics(
        kafka_bootstrap,
        {route.dlq_topic: 1},
        **{"max.message.bytes": str(MIN_DEAD_LETTER_TOPIC_BYTES)},
    )
    long_key = bytes(i % 251 for i in range(3000))
    value = b"{" + b"x" * 19_999  # not JSON
    produce(
        kafka_bootstrap,
        route.source_topics[0],
        [(long_key, value), (b"en", json.dumps(make_tweet(1, "en")).encode())],
    )
    stats = run_ingest(route, TWEETS, StopFlag(), until_idle_s=2.0)
    assert (stats.read, stats.forwarded, stats.dead_lettered, stats.aborted) == (2, 1, 1, 0)

    [copy] = read_all(kafka_bootstrap, route.dlq_topic, 1)
    headers = dict(copy.headers() or [])
    assert headers["source_key"] == long_key[:DLQ_MAX_KEY_BYTES]
    assert headers["source_key_truncated_from_bytes"] == b"3000"
    assert headers["truncated_from_bytes"] == str(len(value)).encode()
    assert headers["reason"].startswith(b"invalid JSON")
    assert value.startswith(copy.value() or b"-") and len(copy.value() or b"") > 1000
