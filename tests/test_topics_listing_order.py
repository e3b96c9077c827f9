"""``sparsewatch topics`` (:func:`~sparsewatch.storage.window_queries.fetch_topics`) on real SQLite
and PostgreSQL: newest window first by its end (ties by window number, then stream in code point
order), strongest topic first (ties by topic number), topics without a window last, for every
limit and filter; and a limited listing reads the topics of the newest windows only, by key,
instead of joining and sorting every topic (a million topics: 1.5 s on SQLite for 50)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sparsewatch.storage import window_queries
from sparsewatch.storage.retention import gather_statistics
from sparsewatch.storage.store import Store

from tests.support.query_plans import statement_plans
from tests.support.storage import T0

# (stream, window, end in hours after T0 or None: no window row, [(topic, strength, emerging)])
WINDOWS: list[tuple[str, int, int | None, list[tuple[int, float, bool]]]] = [
    ("news", 1, 1, [(0, 0.5, False), (1, 0.5, True), (2, 0.7, False)]),
    ("news", 2, 6, [(0, 0.2, False), (1, 0.9, False)]),  # ends after window 3: a size change
    ("news", 3, 4, [(0, 0.4, True), (1, 0.4, False), (2, 0.4, False)]),
    ("news", 4, 5, [(0, 0.3, False)]),  # ends with B 5 and a 5, a smaller number
    ("B", 5, 5, [(0, 0.6, False), (1, 0.1, True)]),
    ("a", 5, 5, [(0, 0.6, True), (1, 0.8, False)]),  # "B" < "a" in code point order
    ("a", 6, 7, [(0, 0.1, False), (1, 0.2, False)]),
    ("news", 9, 9, []),  # the newest window has no topic
    ("news", 8, None, [(0, 0.5, False), (1, 0.6, True)]),  # topics without a window
    ("a", 8, None, [(0, 0.9, False)]),
    ("news", 7, None, [(0, 0.1, False)]),
]

N_WINDOWS = 300  # of 10 topics each


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            for stream, seq, end, rows in WINDOWS:
                if end is not None:
                    end_time = T0 + timedelta(hours=end)
                    start = end_time - timedelta(hours=1)
                    tx.upsert_window(stream, seq, start, end_time, 3, 0.5, {}, "watermark")
                tx.upsert_topics(
                    [
                        {
                            "stream": stream,
                            "window_seq": seq,
                            "topic_id": topic,
                            "terms": [("term", strength)],
                            "strength": strength,
                            "emerging": emerging,
                        }
                        for topic, strength, emerging in rows
                    ]
                )
        yield store


def _expected(
    streams: list[str] | None = None,
    first_window: int | None = None,
    last_window: int | None = None,
    emerging_only: bool = False,
) -> list[tuple[str, int, int]]:
    """Every topic the filters select, in the listing's order, computed here."""
    found: list[tuple[Any, ...]] = []
    for stream, seq, end, rows in WINDOWS:
        if streams and stream not in streams:
            continue
        if (first_window is not None and seq < first_window) or (
            last_window is not None and seq > last_window
        ):
            continue
        for topic, strength, emerging in rows:
            if emerging_only and not emerging:
                continue
            ends = -(end if end is not None else 0)
            found.append((end is None, ends, -seq, stream, -strength, topic))
    return [(stream, -seq, topic) for _, _, seq, stream, _, topic in sorted(found)]


FILTERS: list[dict[str, Any]] = [
    {},
    {"streams": ["a", "B"]},
    {"streams": ["news"]},
    {"first_window": 2, "last_window": 5},
    {"first_window": 6},
    {"last_window": 3},
    {"emerging_only": True},
    {"emerging_only": True, "streams": ["news"]},
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f) or "all")
def test_every_limit_lists_the_first_topics_in_order(store: Store, filters: dict[str, Any]) -> None:
    expected = _expected(**filters)
    assert expected  # each filter selects some
    for limit in [*range(len(expected) + 2), None]:
        rows = store.topics(limit=limit, **filters)
        listed = [(r["stream"], r["window_seq"], r["topic_id"]) for r in rows]
        assert listed == expected[:limit], limit


def test_terms_cut_and_columns_as_stored(store: Store) -> None:
    (row,) = store.topics(limit=1, n_terms=0)
    assert row == {
        "stream": "a",
        "window_seq": 6,
        "topic_id": 1,
        "terms": [],
        "strength": 0.2,
        "emerging": False,
    }


def test_a_limited_listing_reads_the_newest_windows_topics_by_key(database_url: str) -> None:
    """No statement of a limited listing reads the whole topics table: it sorts the windows
    (no index serves their end either) and looks their topics up by the primary key."""
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            for seq in range(N_WINDOWS):
                end = T0 + timedelta(hours=seq)
                tx.upsert_window("news", seq, end - timedelta(hours=1), end, 5, None, {}, "count")
                rows = [
                    {
                        "stream": "news",
                        "window_seq": seq,
                        "topic_id": k,
                        "terms": [("term", 1.0)],
                        "strength": k / 10,
                        "emerging": False,
                    }
                    for k in range(10)
                ]
                tx.upsert_topics(rows)
        postgresql = store.engine.dialect.name == "postgresql"
        if postgresql:
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        else:  # as db prune and the workers' writers leave it
            gather_statistics(store.engine)
        with store.reading() as conn:
            if postgresql:  # a table this small it reads whole whatever the statement: not so
                conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            query = lambda c: window_queries.fetch_topics(c, limit=51)  # noqa: E731
            rows = query(conn)
            plans = statement_plans(conn, query)
    assert [(r["window_seq"], r["topic_id"]) for r in rows[:11]] == [
        *((N_WINDOWS - 1, k) for k in range(9, -1, -1)),
        (N_WINDOWS - 2, 9),
    ]
    assert len(rows) == 51
    topics_read = "\n".join(p for p in plans if "topics" in p)
    if postgresql:  # each window's topics looked up, not the whole index read
        lookup = "Index Scan using pk_topics on topics"
        lines = topics_read.splitlines()
        reads = [i for i, line in enumerate(lines) if lookup in line]
        assert reads, plans
        assert all("Index Cond" in lines[i + 1] for i in reads), plans
    else:
        assert "SCAN topics" not in topics_read, plans
        assert "SEARCH topics USING INDEX sqlite_autoindex_topics_1" in topics_read, plans
