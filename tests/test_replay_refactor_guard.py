"""Branches of ``replay_documents`` and of the document checks that only the API reaches (the
command line refuses the same options and values before): guards of their errors, and of the
order of the checks, across the split of those functions into helpers."""

from __future__ import annotations

import pytest
from sparsewatch.consumers.field_mapping import FieldMapping, to_document
from sparsewatch.consumers.messages import RecordError
from sparsewatch.replay.producer import replay_documents

T0 = 1_767_225_600_000  # 2026-01-01


@pytest.mark.kafka
def test_end_of_stream_after_a_limit_without_sorting_is_refused(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """Only the sorted replay reads the documents past a ``limit`` (which streams go on), so
    end-of-stream markers after a limit need it: the API refuses the unsorted replay."""
    docs = [{"id": "a", "text": "t", "timestamp": T0}]
    with pytest.raises(ValueError, match=r"^end_of_stream with a limit needs the sorted replay"):
        replay_documents(docs, kafka_bootstrap, topic_name, limit=1, sort=False, end_of_stream=True)


def test_a_blank_default_stream_is_refused_before_the_text_size() -> None:
    """A record without a stream takes the mapping's default stream; a blank one is no stream
    the detector takes. The string checks come before the text's size: a record with both
    faults names the stream."""
    record = {"id": "a", "text": "x" * 20, "timestamp": T0}
    with pytest.raises(RecordError, match=r"^field 'stream' is empty$"):
        to_document(record, FieldMapping(default_stream="  "), max_text_bytes=10)
    with pytest.raises(RecordError, match=r"^text longer than 10 bytes$"):
        to_document(record, FieldMapping(), max_text_bytes=10)
