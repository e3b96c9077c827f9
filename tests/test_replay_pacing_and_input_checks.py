"""Replay without a broker: pacing of out-of-order input, timestamps as CSV text, stream types,
parameter checks and time zone of the synthetic generators."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sparsewatch.consumers.field_mapping import FieldMapping
from sparsewatch.replay import producer as producer_module
from sparsewatch.replay.documents import ErrorFile, ReadStats, read_documents
from sparsewatch.replay.producer import Pacer, replay_documents
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.replay.topic_simulation import simulate_topic_stream


class FakeClock:
    """A clock that only moves when the test moves it."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _paced(pacer: Pacer, clock: FakeClock, timestamps: list[int]) -> list[float]:
    """The pause before each timestamp, the clock moving by each pause."""
    delays = []
    for ts in timestamps:
        delays.append(pacer.delay(ts))
        clock.now += delays[-1]
    return delays


def test_speedup_paces_the_gaps_after_an_out_of_order_timestamp() -> None:
    clock = FakeClock()
    pacer = Pacer(speedup=1.0, clock=clock)
    # unsorted input (--no-sort): after stepping back from 10 s to 5 s, 1 s gaps stay 1 s pauses
    delays = _paced(pacer, clock, [0, 10_000, 5_000, 6_000, 7_000, 11_000])
    assert delays == pytest.approx([0.0, 10.0, 0.0, 1.0, 1.0, 4.0])


def test_one_corrupt_future_timestamp_does_not_switch_pacing_off() -> None:
    clock = FakeClock()
    pacer = Pacer(speedup=1.0, max_wait_s=2.0, clock=clock)
    # a timestamp 11 days ahead, capped at 2 s; the documents after it keep their 1 s gaps
    delays = _paced(pacer, clock, [0, 10**9, 1_000, 2_000, 3_000, 4_000])
    assert delays == pytest.approx([0.0, 2.0, 0.0, 1.0, 1.0, 1.0])


@pytest.mark.parametrize(("pace", "pause"), [({"rate": 0.5}, 2.0), ({"speedup": 2.0}, 1.5)])
def test_the_upcoming_pause_is_the_delay_without_counting_the_document(
    pace: dict[str, float], pause: float
) -> None:
    pacer = Pacer(**pace, clock=FakeClock())
    assert pacer.upcoming(1_000) == 0.0
    assert pacer.delay(1_000) == 0.0
    assert pacer.upcoming(4_000) == pacer.upcoming(4_000) == pytest.approx(pause)
    assert pacer.delay(4_000) == pytest.approx(pause)


class FakeProducer:
    """A producer that delivers every message at once."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Any) -> None:
        self.values.append(value)
        on_delivery(None, None)

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0

    def purge(self) -> None:
        pass

    def __len__(self) -> int:
        return 0


def test_documents_too_far_ahead_are_rejected_before_their_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each rejected document was paced first, then rejected: it cost 1 / rate seconds, and the
    documents sent after it waited for its place in the pace."""
    fake = FakeProducer()
    paced: list[int] = []

    class SpyPacer(Pacer):
        def delay(self, timestamp_ms: int) -> float:
            paced.append(timestamp_ms)
            return super().delay(timestamp_ms)

    # a topic without a size limit or cleanup policy of its own
    monkeypatch.setattr(
        producer_module.TopicLimits, "read", lambda *_: producer_module.TopicLimits()
    )
    monkeypatch.setattr(producer_module, "make_producer", lambda *_, **__: fake)
    monkeypatch.setattr(producer_module, "Pacer", SpyPacer)
    now_ms = time.time_ns() // 1_000_000
    future = now_ms + 10 * 365 * 86_400_000
    stamps = [future, future + 1, future + 2, now_ms, now_ms + 1]
    docs = [{"id": str(i), "text": "hello", "timestamp": ts} for i, ts in enumerate(stamps)]
    started = time.monotonic()
    summary = replay_documents(docs, "fake:9092", "docs", rate=4.0, sort=False, max_ahead_ms=60_000)
    assert (summary.rejected, summary.produced, summary.resume_skip) == (3, 2, 5)
    assert paced == [now_ms, now_ms + 1]
    assert [json.loads(v)["id"] for v in fake.values] == ["3", "4"]
    assert time.monotonic() - started < 0.75  # one pause of 1 / rate; the rejections took four


def _read(tmp_path: Path, name: str, body: str) -> tuple[list[dict], list[dict]]:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    errors_path = tmp_path / f"{name}.errors"
    with ErrorFile(errors_path) as errors:
        docs = list(read_documents([path], FieldMapping(), errors, None, ReadStats()))
    lines = errors_path.read_text().splitlines() if errors_path.exists() else []
    return docs, [json.loads(x) for x in lines]


def test_a_csv_float_column_of_epoch_ms_reads_like_the_same_json_numbers(tmp_path: Path) -> None:
    # a spreadsheet or pandas writes a float column as 1700000000000.0
    rows = [("a", 1_700_000_000_000.0), ("b", 1_700_000_000_250.75)]
    jsonl = "".join(json.dumps({"id": i, "text": "t", "timestamp": ts}) + "\n" for i, ts in rows)
    csv = "id,text,timestamp\n" + "".join(f"{i},t,{ts!r}\n" for i, ts in rows)
    from_json, json_errors = _read(tmp_path, "c.jsonl", jsonl)
    from_csv, csv_errors = _read(tmp_path, "c.csv", csv)
    assert json_errors == csv_errors == []
    assert [d["timestamp"] for d in from_csv] == [1_700_000_000_000, 1_700_000_000_250]
    assert from_csv == from_json


@pytest.mark.parametrize("stream", [{"a": 1}, ["s"], True, 1.5])
def test_a_stream_that_is_no_string_or_integer_is_rejected_with_its_line(
    tmp_path: Path, stream: object
) -> None:
    records = [
        {"id": "1", "text": "t", "timestamp": 1_700_000_000_000, "stream": 7},
        {"id": "2", "text": "t", "timestamp": 1_700_000_000_000, "stream": stream},
    ]
    docs, errors = _read(tmp_path, "s.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    assert [d["stream"] for d in docs] == ["7"]  # an integer id is its decimal text
    assert [(e["line"], e["reason"].split(",")[0]) for e in errors] == [
        (2, "stream must be a string or an integer")
    ]


def test_synthetic_timestamps_are_utc_whatever_the_offset_of_start() -> None:
    start = "2026-01-01T00:00:00+02:00"
    docs = generate_stream(30, start=start, seed=4)
    utc = generate_stream(30, start="2025-12-31T22:00:00+00:00", seed=4)
    assert all(d["timestamp"].endswith("+00:00") for d in docs)
    assert docs == utc  # the same instants, written the same way
    first = datetime.fromisoformat(docs[0]["timestamp"])
    assert first.tzinfo == UTC
    assert timedelta(0) < first - datetime.fromisoformat(start) < timedelta(minutes=10)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"second_topic_prob": 1.5}, "second_topic_prob"),
        ({"second_topic_prob": -0.1}, "second_topic_prob"),
        ({"topic_share": 0.9, "category_share": 0.3}, "topic_share"),
        ({"shared_keyword_frac": 1.5}, "shared_keyword_frac"),
        ({"n_shared_keywords": 3}, "n_shared_keywords"),
        ({"burst_docs": 0.0}, "burst_docs"),
        ({"n_categories": 0}, "n_categories"),
        ({"n_docs": -1}, "n_docs"),
    ],
)
def test_synthetic_parameters_out_of_range_are_refused_by_name(params: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        generate_stream(**{"n_docs": 20, **params})


def test_simulated_dominant_topic_really_dominates_or_the_parameters_are_refused() -> None:
    # below 0.5 another topic could outweigh the "dominant" one, whose labels would be wrong
    with pytest.raises(ValueError, match="dominant_min"):
        simulate_topic_stream(dominant_min=0.3)
    with pytest.raises(ValueError, match="dominant_min"):
        simulate_topic_stream(dominant_min=1.2)
    s = simulate_topic_stream(dominant_min=0.5, random_state=1)
    assert np.all(s.mixing.argmax(axis=1) == s.dominant)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"n_days": 10}, "n_days"),  # topic 24 would be born after the last day
        ({"n_initial": 0}, "n_initial"),
        ({"n_initial": 30}, "n_initial"),
        ({"topics_per_doc": 0.5}, "topics_per_doc"),
    ],
)
def test_simulated_stream_parameters_outside_the_setting_are_refused(
    params: dict, named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        simulate_topic_stream(**params)


def _story(newid: int, title: str, body: str, closed: bool = True) -> str:
    element = (
        f'<REUTERS TOPICS="NO" NEWID="{newid}">\n<DATE>26-FEB-1987 15:0{newid}:00.00</DATE>\n'
        f"<TEXT><TITLE>{title}</TITLE>\n<BODY>{body}</BODY></TEXT>\n"
    )
    return element + ("</REUTERS>\n" if closed else "")


def test_a_reuters_element_without_its_end_tag_is_rejected_not_merged_into_the_next(
    tmp_path: Path,
) -> None:
    # story 1 lost its end tag (a damaged file): it used to take story 2's body, and story 2
    # vanished without a report
    sgml = _story(1, "ONE", "first", closed=False) + _story(2, "TWO", "second")
    sgml += _story(3, "THREE", "third")
    docs, errors = _read(tmp_path, "reut2-000.sgm", sgml)
    assert [(d["id"], d["text"]) for d in docs] == [("2", "TWO\n\nsecond"), ("3", "THREE\n\nthird")]
    assert [(e["line"], e["reason"]) for e in errors] == [
        (1, "unterminated REUTERS element (truncated file?)")
    ]
    assert errors[0]["raw"].startswith('<REUTERS TOPICS="NO" NEWID="1">')


def test_a_csv_header_naming_a_column_twice_rejects_its_records_with_the_reason(
    tmp_path: Path,
) -> None:
    # which "text" a record kept was the parser's choice: the other column's value vanished
    rows = ["id,text,timestamp,text,,", "1,headline,1700000000000,story,,", "2,h,1700000000001,s,,"]
    body = "".join(row + "\r\n" for row in rows)
    docs, errors = _read(tmp_path, "dup.csv", body)
    assert docs == []
    assert [e["line"] for e in errors] == [1, 2, 3]
    assert all("names column 'text' twice" in e["reason"] for e in errors)
    # unnamed columns (a spreadsheet's trailing commas) are no duplicates
    docs, errors = _read(tmp_path, "ok.csv", "id,text,timestamp,,\n1,t,1700000000000,,\n")
    assert errors == [] and [d["id"] for d in docs] == ["1"]
