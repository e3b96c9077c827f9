"""Status: ``Store.status`` (``sparsewatch status``) per stream, on real SQLite and
PostgreSQL databases (``sw_review_*``, dropped afterwards)."""

from __future__ import annotations

from datetime import timedelta

from sparsewatch.storage.store import Store

from tests.support.store_windows import T0, url, window

__all__ = ["url"]  # the fixture


def _hourly_then_daily(store: Store) -> tuple[int, int]:
    """An hourly window, then a daily one (``windows.size`` changed to 1 day): the daily window
    ends last but has the smaller number. Returns both numbers."""
    hourly = int(T0.timestamp() // 3600)
    window(store, "s", hourly, T0, timedelta(hours=1))
    daily = int((T0 + timedelta(days=1)).timestamp() // 86400)
    window(store, "s", daily, T0 + timedelta(days=1), timedelta(days=1))
    return hourly, daily


def test_the_last_window_is_the_one_that_ends_last_after_a_window_size_change(url: str) -> None:
    # The last window was the largest number (an hourly one) shown with the daily one's end.
    with Store.open(url) as store:
        _, daily = _hourly_then_daily(store)
        (s,) = store.status()["streams"]
        assert s["windows"] == 2
        assert (s["last_window"], s["last_window_end"]) == (daily, T0 + timedelta(days=2))


def test_an_empty_database_and_unusual_stream_ids(url: str) -> None:
    with Store.open(url) as store:
        empty = {"streams": [], "offsets": [], "dead_letters": 0, "unsent_alerts": 0}
        assert store.status() == empty
        names = ["", " ", "a%", "a_", "A", "a", "ünï", "x\ny", "😀"]
        for k, name in enumerate(names):
            window(store, name, k, T0 + k * timedelta(hours=1), timedelta(hours=1), n=k + 1)
        got = store.status()["streams"]
        assert [s["stream"] for s in got] == sorted(names)
        assert {s["stream"]: s["documents"] for s in got} == {n: k + 1 for k, n in enumerate(names)}
        (only,) = store.status(streams=["a%"])["streams"]
        assert only["stream"] == "a%" and only["documents"] == 3


def test_the_newest_snapshot_is_the_last_written_after_a_window_size_change(url: str) -> None:
    with Store.open(url) as store:
        _, daily = _hourly_then_daily(store)
        snapshot = store.load_snapshot("s", "dictionary")
        assert snapshot is not None and snapshot.window_seq == daily  # was the hourly one
