"""Listings of windows, topics and snapshots put the newest first although window numbers go down
when ``windows.size`` grows (a window's number is its start over the size)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from sparsewatch.storage.store import Store

from tests.support.cli import run_cli

HOUR, DAY = timedelta(hours=1), timedelta(days=1)


def _seq(start: datetime, size: timedelta) -> int:
    return int(start.timestamp() * 1000) // int(size.total_seconds() * 1000)


def _window(store: Store, stream: str, start: datetime, size: timedelta, term: str) -> int:
    seq = _seq(start, size)
    with store.transaction() as tx:
        tx.upsert_window(stream, seq, start, start + size, 10, 0.5, {}, "watermark")
        topic = {"terms": [[term, 1.0]], "strength": 0.5, "emerging": False}
        tx.upsert_topics([{"stream": stream, "window_seq": seq, "topic_id": 1, **topic}])
        tx.put_snapshot(stream, seq, "dictionary", {"A": np.zeros(1)}, {}, 1)
    return seq


def test_a_grown_window_size_lists_the_newest_window_first(database_url, monkeypatch, capsys):
    """An hour window of Jan 10 (number 491,135), then, windows.size raised to a day, the day
    of Jan 20 (number 20,473): ``topics --limit 1`` and ``snapshots list --limit 1`` showed the
    old hour; ``status`` and ``snapshots export`` took the day. (Another stream's window of
    Jan 15 is numbered above both.)"""
    with Store.open(database_url) as store:
        old = _window(store, "news", datetime(2026, 1, 10, 23, tzinfo=UTC), HOUR, "hourly")
        new = _window(store, "news", datetime(2026, 1, 20, tzinfo=UTC), DAY, "daily")
        # another stream's window between the two in event time, numbered above both
        other = _window(store, "wire", datetime(2026, 1, 15, tzinfo=UTC), HOUR, "wire")
        assert other > old > new
        assert [r["window_seq"] for r in store.windows()] == [new, other, old]
        assert [r["window_seq"] for r in store.topics()] == [new, other, old]
    code, out, err = run_cli(
        monkeypatch, capsys, "topics", "--limit", "1", "--format", "csv", "--database-url",
        database_url,
    )  # fmt: skip
    assert code == 0 and "daily" in out and "hourly" not in out, err
    code, out, err = run_cli(
        monkeypatch, capsys, "snapshots", "list", "--limit", "1", "--format", "csv",
        "--database-url", database_url,
    )  # fmt: skip
    assert code == 0 and f"news,{new}," in out, err
    code, out, err = run_cli(
        monkeypatch, capsys, "snapshots", "list", "--stream", "news", "--limit", "1", "--format",
        "csv", "--database-url", database_url,
    )  # fmt: skip
    assert code == 0 and f"news,{new}," in out, err
