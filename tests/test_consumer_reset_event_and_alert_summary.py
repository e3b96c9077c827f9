"""Values the type hints of the consumers said could be missing, handled where they are.

* A Kafka offset-reset event has no offset (``None``) when what failed was the lookup of a
  logical start, the partition's earliest message: the consumer raised ``TypeError`` (``low -
  None``) from its next poll. It now restarts the partition at its earliest message.
* A stored document row may have no text (the column is nullable): its novelty alert's summary
  raised ``AttributeError``; it is now empty.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message
from sparsewatch.consumers.detector_core import novel_alerts
from sparsewatch.storage.document_columns import DocumentColumns

from tests.support.kafka_topics import (
    consumer_noting_resets,
    read_offsets,
    topic_with_deleted_head,
)


@pytest.mark.kafka
def test_a_reset_event_without_an_offset_restarts_the_partition_at_its_earliest_message(
    kafka_bootstrap, caplog
):
    topic = topic_with_deleted_head(kafka_bootstrap, [b"%d" % i for i in range(12)], 4)
    resets: list[tuple[str, int, int]] = []
    # What librdkafka emits when the lookup of a partition's logical start fails for good (its
    # fetcher then stops): the event carries the logical offset, which the client gives as None.
    event = Message(
        topic=topic,
        partition=0,
        offset=OFFSET_BEGINNING,
        error=KafkaError(KafkaError._AUTO_OFFSET_RESET, "failed to query logical offset"),
    )
    assert event.offset() is None
    with (
        caplog.at_level("WARNING", logger="sparsewatch.consumers.kafka_client"),
        consumer_noting_resets(kafka_bootstrap, topic, resets) as consumer,
    ):
        assert read_offsets(consumer, 8) == list(range(4, 12))
        assert consumer._messages([event]) == []  # as a poll meets it
        assert read_offsets(consumer, 8) == list(range(4, 12))  # from the earliest message again
    assert resets == [(topic, 0, 0)]
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning == f"{topic} [0]: its earliest offset could not be looked up; reading from 4"


def test_a_novel_document_stored_without_its_text_has_an_empty_alert_summary():
    when = datetime(2024, 5, 1, tzinfo=UTC)
    row = {"stream": "s", "event_time": when, "window_seq": 3, "novelty_score": 0.9, "novel": True}
    rows = [{**row, "doc_id": "a"}, {**row, "doc_id": "b", "text": "  two\n words "}]
    alerts = novel_alerts(DocumentColumns.from_rows(rows))
    assert [(a["subject_id"], a["summary"]) for a in alerts] == [("a", ""), ("b", "two words")]
