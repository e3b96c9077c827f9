"""The queries that read whole tables on a large database (``benchmarks/query_scale.py``):
``dead-letters --summary`` groups by the reason pattern stored with each dead letter (revision
0006) through its index instead of handing every distinct reason to Python, with the same counts;
on SQLite a ``--grep`` / ``--reason`` tests SQLite's own LIKE before calling Python's lower() on
a row, with the same rows."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sparsewatch.storage.store as store_module
import sqlalchemy as sa
from alembic import command
from sparsewatch.storage import migrate
from sparsewatch.storage.alert_queries import fetch_alerts
from sparsewatch.storage.dead_letter_queries import (
    _dead_letter_conditions,
    dead_letter_reasons,
    fetch_dead_letters,
)
from sparsewatch.storage.schema import dead_letters, reason_pattern
from sparsewatch.storage.store import Store
from sparsewatch.storage.text_match import _FOLDED_FROM_ELSEWHERE, _sqlite_like, fold_case

from tests.support.query_plans import indexes, query_plan

T0 = datetime(2024, 6, 1, tzinfo=UTC)
INDEX = "ix_dead_letters_reason_pattern_topic_created_at"
TOPICS = ("sw.docs", "sw.scores", "tweets")
# Numbers to be read as N and numbers that are not (the 8 of UTF-8, part of a word, after a
# hyphen), digits of other scripts, a reason without numbers
REASONS = (
    "duplicate of the document at partition {p}, offset {n} (a closed window had it)",
    "not JSON: Expecting value: line 1 column {n} (char {n})",
    "not UTF-8 (byte {p})",
    "field 'x{n}' is not a number: -{p}",
    "message of {n}² bytes exceeds the limit: ٣{p}",
    "missing field 'text'",
)


def _dead_letters(first: int, n: int) -> list[dict[str, Any]]:
    return [
        {
            "topic": TOPICS[o // len(REASONS) % 3],
            "partition": o % 4,
            "offset": o,
            "reason": REASONS[o % len(REASONS)].format(n=o % 97, p=o % 5),
            "payload": b"x",
        }
        for o in range(first, first + n)
    ]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[datetime]]:
    """The store's clock (``created_at``): the last time in the list."""
    times = [T0]
    monkeypatch.setattr(store_module, "_now", lambda: times[-1])
    yield times


def _fill(store: Store, clock: list[datetime], batches: int, size: int) -> None:
    """``batches`` transactions of ``size`` dead letters, a minute apart (ties within each)."""
    for b in range(batches):
        clock.append(T0 + timedelta(minutes=b))
        store.insert_dead_letters(_dead_letters(b * size, size))


def _insert_without_pattern(engine: sa.Engine, rows: list[dict[str, Any]], at: datetime) -> None:
    """What a version before revision 0006 writes (still running while another upgraded the
    database): no reason_pattern."""
    stmt = sa.text(
        'INSERT INTO dead_letters (topic, partition, "offset", reason, payload, created_at) '
        "VALUES (:topic, :partition, :offset, :reason, :payload, :created_at)"
    )
    # (on SQLite as SQLAlchemy's DateTime stores it: sqlite3's own datetime adapter is
    # deprecated from Python 3.12)
    stamp = at.strftime("%Y-%m-%d %H:%M:%S.%f") if engine.dialect.name == "sqlite" else at
    with engine.begin() as conn:
        conn.execute(stmt, [{**r, "created_at": stamp} for r in rows])


def _summary_as_before(conn: sa.Connection, **filters: Any) -> list[dict[str, Any]]:
    """The summary as the code before revision 0006 computed it: every matching row's reason
    pattern in Python; the newest reason (the greatest of those stored last) as the example."""
    d = dead_letters.c
    conditions = _dead_letter_conditions(
        conn,
        filters.get("since"),
        filters.get("until"),
        filters.get("source_topics"),
        filters.get("reason"),
    )
    rows = conn.execute(sa.select(d.reason, d.topic, d.created_at).where(*conditions)).all()
    groups: dict[str, dict[str, Any]] = {}
    for reason, topic, at in rows:
        group = groups.setdefault(
            reason_pattern(reason),
            {"count": 0, "first_at": at, "last_at": at, "example": reason, "topics": set()},
        )
        group["count"] += 1
        group["topics"].add(topic)
        group["first_at"] = min(group["first_at"], at)
        group["last_at"], group["example"] = max((group["last_at"], group["example"]), (at, reason))
    out = [
        {**g, "reason": p, "topics": sorted(g["topics"])}
        for p, g in sorted(groups.items(), key=lambda kv: (-kv[1]["count"], kv[0]))
    ]
    limit = filters.get("limit", 100)
    return out if limit is None else out[:limit]


SUMMARY_FILTERS: dict[str, dict[str, Any]] = {
    "all": {},
    "--limit 2": {"limit": 2},
    "--since --until": {"since": T0 + timedelta(minutes=2), "until": T0 + timedelta(minutes=5)},
    "--topic": {"source_topics": ["sw.scores", "tweets"]},
    "--reason": {"reason": "NOT utf-8"},
    "--reason (no row)": {"reason": "omega"},
}


def test_summary_counts_as_before_also_rows_stored_without_a_pattern(
    database_url: str, clock: list[datetime]
) -> None:
    with Store.open(database_url) as store:
        _fill(store, clock, batches=8, size=60)
        # an older version's rows, among them a reason also stored with its pattern, the newest
        # of its pattern at a time other rows of it have
        late = T0 + timedelta(minutes=7)
        old = [*_dead_letters(10_000, 30), {**_dead_letters(479, 1)[0], "offset": 20_000}]
        _insert_without_pattern(store.engine, old, late)
        with store.reading() as conn:
            for name, filters in SUMMARY_FILTERS.items():
                got = dead_letter_reasons(conn, **filters)
                assert got == _summary_as_before(conn, **filters), name
            everything = dead_letter_reasons(conn, limit=None)
    assert sum(g["count"] for g in everything) == 8 * 60 + 31
    by_pattern = {g["reason"]: g for g in everything}
    assert "not UTF-8 (byte N)" in by_pattern
    assert "field 'x7' is not a number: -1" in by_pattern  # numbers in words, after a hyphen
    assert "message of 66² bytes exceeds the limit: N" in by_pattern  # ٣ is a digit, ² not
    assert by_pattern["missing field 'text'"]["topics"] == sorted(TOPICS)


def test_summary_reads_the_pattern_index(database_url: str, clock: list[datetime]) -> None:
    # Grouped by exact reason, every distinct reason went to Python: 500,000 distinct ones took
    # 4-7 s; by the stored pattern, read in its index order, a few rows come back (0.06-0.16 s)
    with Store.open(database_url) as store:
        _fill(store, clock, batches=40, size=500)
        if store.engine.dialect.name == "postgresql":  # as autovacuum does
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        with store.reading() as conn:
            plan = query_plan(conn, dead_letter_reasons)
            rows = dead_letter_reasons(conn, limit=None)
            assert rows == _summary_as_before(conn, limit=None)
    assert INDEX in plan, plan
    assert sum(r["count"] for r in rows) == 20_000


def test_inserted_dead_letters_store_their_reason_pattern(
    database_url: str, clock: list[datetime]
) -> None:
    with Store.open(database_url) as store:
        _fill(store, clock, batches=2, size=12)
        with store.reading() as conn:
            d = dead_letters.c
            stored = conn.execute(sa.select(d.reason, d.reason_pattern)).all()
    assert len(stored) == 24
    assert all(pattern == reason_pattern(reason) for reason, pattern in stored)
    assert {p for _, p in stored} >= {"not UTF-8 (byte N)", "missing field 'text'"}


def test_revision_0006_fills_the_patterns_of_stored_dead_letters_and_downgrades(
    database_url: str,
) -> None:
    engine = sa.create_engine(database_url)
    try:
        migrate.upgrade(engine, "0005")
        rows = _dead_letters(0, 40)
        rows[1]["reason"] = rows[0]["reason"]  # a reason twice
        _insert_without_pattern(engine, rows, T0)
        migrate.upgrade(engine, "0006")
        with engine.connect() as conn:
            stored = conn.execute(sa.text("SELECT reason, reason_pattern FROM dead_letters")).all()
        assert len(stored) == 40
        assert all(pattern == reason_pattern(reason) for reason, pattern in stored)
        assert indexes(engine, "dead_letters")[INDEX] == ["reason_pattern", "topic", "created_at"]
        config = migrate.alembic_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0005")
        assert migrate.current_revision(engine) == "0005"
        assert INDEX not in indexes(engine, "dead_letters")
        columns = {c["name"] for c in sa.inspect(engine).get_columns("dead_letters")}
        assert "reason_pattern" not in columns
        migrate.upgrade(engine, "0006")
        assert migrate.current_revision(engine) == "0006"
    finally:
        engine.dispose()
    with Store.open(database_url) as store, store.reading() as conn:
        summary = dead_letter_reasons(conn)
        assert summary == _summary_as_before(conn)
        [row] = fetch_dead_letters(conn, limit=1, source_topics=[rows[0]["topic"]])
    assert "reason_pattern" not in row  # the listing's rows are as before


# Texts whose folded form holds ASCII letters that come from other characters (the Kelvin sign,
# the dotted capital I), Greek sigmas, the German sharp s, LIKE's wildcards and escape
TEXTS = (
    "5 \u212aelvin at the İstanbul office",
    "KELVIN and kelvin",
    "ΣΟΦΟΣ said σοφός",
    "Straße / STRASSE / ẞ",
    "100%_off a/b",
    "Zürich, ZÜRICH",
    "plain text",
    "",
)
GREPS = (
    "kelvin",
    "istanbul",
    "İSTANBUL",
    "σοφοσ",
    "ß",
    "ss",
    "%_o",
    "a/b",
    "zürich",
    "k",
    "i",
    " ",
    "omega",
)


def _alerts(texts: tuple[str, ...]) -> list[dict[str, Any]]:
    return [
        {
            "kind": "anomaly",
            "stream": "s",
            "subject_id": f"d{i}",
            "score": 1.0,
            "window_seq": 0,
            "event_time": T0,
            "summary": text,
        }
        for i, text in enumerate(texts)
    ]


def test_grep_finds_every_text_that_contains_it_in_any_case(
    database_url: str, clock: list[datetime]
) -> None:
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.insert_alerts(_alerts(TEXTS))
        store.insert_dead_letters(
            [
                {"topic": "t", "partition": 0, "offset": i, "reason": text, "payload": b""}
                for i, text in enumerate(TEXTS)
            ]
        )
        with store.reading() as conn:
            for grep in GREPS:
                expected = {t for t in TEXTS if fold_case(grep) in fold_case(t)}
                alerts = fetch_alerts(conn, text=grep, limit=None)
                assert {r["summary"] for r in alerts} == expected, grep
                letters = fetch_dead_letters(conn, reason=grep, limit=None)
                assert {r["reason"] for r in letters} == expected, grep
    assert {t for t in TEXTS if "kelvin" in fold_case(t)} == set(TEXTS[:2])


def test_the_sqlite_like_pattern_lets_through_every_character_folding_to_ascii() -> None:
    # _sqlite_like relies on it: an ASCII character c that fold_case makes of a character other
    # than c and c.upper() (which SQLite's LIKE matches) is written "_" (any character)
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        folded = fold_case(char)
        if len(folded) == 1 and folded.isascii() and char not in (folded, folded.upper()):
            assert folded in _FOLDED_FROM_ELSEWHERE, hex(code)
    assert _sqlite_like("k%_/i-ζ") == "%_/%/_//_-_%"


def _counting_lower(conn: sa.Connection) -> list[str]:
    """Replace this connection's lower() (Python's, as the engine registers it) by one that
    also records what it is called with."""
    calls: list[str] = []

    def lower(value: Any) -> Any:
        calls.append(value)
        return value.lower() if isinstance(value, str) else value

    dbapi = conn.connection.driver_connection
    assert isinstance(dbapi, sqlite3.Connection)
    dbapi.create_function("lower", 1, lower, deterministic=True)
    return calls


def test_sqlite_grep_calls_python_lower_only_for_rows_its_like_lets_through(
    tmp_path: Path, clock: list[datetime]
) -> None:
    # Python's lower() for every row was most of a grep's time on SQLite (a word in no row:
    # 0.53 s over 300,000 alert summaries, 5.1 s over 3,000,000 document texts); SQLite's LIKE
    # (ASCII case only, in C) now leaves out the rows that cannot match first (0.12 s, 1.6 s)
    texts = tuple(f"story {i} of alpha beta" for i in range(300)) + TEXTS
    with Store.open(f"sqlite:///{tmp_path / 'grep.db'}") as store:
        with store.transaction() as tx:
            tx.insert_alerts(_alerts(texts))
        with store.reading() as conn:
            calls = _counting_lower(conn)
            assert fetch_alerts(conn, text="omega", limit=50) == []
            assert calls == []
            found = fetch_alerts(conn, text="KELVIN", limit=50)
            assert {r["summary"] for r in found} == set(TEXTS[:2])
            assert len(calls) == 2  # (after replace(): "İ" is "i" by then)
            calls.clear()
            assert len(fetch_alerts(conn, text="ALPHA", limit=None)) == 300
            assert len(calls) == 300
