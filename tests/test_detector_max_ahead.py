"""The detector's guard on event times far after their message's Kafka timestamp
(``windows.max_ahead``): the parser's verdict, its configuration, and what it leaves alone."""

from __future__ import annotations

import json

import pytest
from sparsewatch.consumers.detector_worker import DetectorProcessor
from sparsewatch.consumers.messages import Document, EndOfStream, InvalidMessageError

from sparsewatch.config import load_config
from sparsewatch.errors import SparsewatchError

SENT_MS = 1_795_000_000_000  # the message's Kafka timestamp
HOUR_MS = 3_600_000


def _message(timestamp_ms: int) -> bytes:
    return json.dumps({"id": "d", "text": "hello world", "timestamp": timestamp_ms}).encode()


def _processor(**env: str) -> DetectorProcessor:
    return DetectorProcessor(
        load_config(env={f"SPARSEWATCH_WINDOWS_{k}": v for k, v in env.items()})
    )


def test_an_event_time_more_than_a_day_after_the_kafka_timestamp_is_refused_with_the_reason():
    processor = _processor()
    with pytest.raises(InvalidMessageError, match=r"more than windows.max_ahead \(1d\) after"):
        processor.parse(_message(SENT_MS + 24 * HOUR_MS + 1), SENT_MS)
    # At the bound, earlier (a replayed past), or without a Kafka timestamp: a document.
    for ms, sent in ((SENT_MS + 24 * HOUR_MS, SENT_MS), (0, SENT_MS), (SENT_MS * 2, None)):
        assert isinstance(processor.parse(_message(ms), sent), Document)


def test_the_bound_is_configurable_and_can_be_turned_off():
    ahead = _message(SENT_MS + 2 * HOUR_MS)
    with pytest.raises(InvalidMessageError, match=r"windows.max_ahead \(1h\)"):
        _processor(MAX_AHEAD="1h").parse(ahead, SENT_MS)
    assert isinstance(_processor(MAX_AHEAD="3h").parse(ahead, SENT_MS), Document)
    far = _message(SENT_MS + 10**12)
    assert isinstance(_processor(MAX_AHEAD="off").parse(far, SENT_MS), Document)
    # Count windows are not cut by event time: nothing to guard.
    assert isinstance(_processor(COUNT="100").parse(far, SENT_MS), Document)


def test_an_end_of_stream_marker_is_not_checked():
    marker = json.dumps({"stream": "s", "end_of_stream": True}).encode()
    assert isinstance(_processor().parse(marker, 0), EndOfStream)


@pytest.mark.parametrize("value", ["soon", "-1h", "", "1y"])
def test_a_bound_that_is_not_a_duration_is_a_configuration_error(value):
    with pytest.raises(SparsewatchError, match=r"windows\.max_ahead"):
        load_config(env={"SPARSEWATCH_WINDOWS_MAX_AHEAD": value})
