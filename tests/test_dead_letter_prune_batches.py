"""Dead letters looked up and pruned by statements whose text and bound parameters do not grow
with the number of keys, on real SQLite and PostgreSQL: ``db prune --dead-letters-before``
(:func:`~sparsewatch.storage.retention.prune`) lets the database choose each batch, and
:meth:`~sparsewatch.storage.store.Store.stored_dead_letters` (the worker's writer, before each
transaction with dead letters) hands the keys over as one value whatever their number. A literal
list of keys, three parameters a key, cost PostgreSQL seconds of planning (an OR of each key)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sparsewatch.storage import retention
from sparsewatch.storage.schema import dead_letters
from sparsewatch.storage.store import Store

OLD = datetime(2020, 1, 1, tzinfo=UTC)
CUT = datetime(2021, 1, 1, tzinfo=UTC)


@contextmanager
def statements(engine: sa.Engine, verb: str) -> Iterator[list[tuple[str, Any]]]:
    """The statements starting with ``verb`` that reach the driver in the block, with their
    parameters."""
    seen: list[tuple[str, Any]] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith(verb) and "dead_letters" in statement:
            seen.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def _letters(topic: str, partition: int, offsets: range) -> list[dict[str, Any]]:
    return [
        {
            "topic": topic,
            "partition": partition,
            "offset": o,
            "reason": f"bad json at {o}",
            "payload": f"payload {o}".encode(),
        }
        for o in offsets
    ]


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    with Store.open(database_url) as store:
        yield store


def test_prune_deletes_old_dead_letters_a_batch_at_a_time_by_one_statement(store, monkeypatch):
    monkeypatch.setattr(retention, "DEAD_LETTER_BATCH", 7)
    store.insert_dead_letters(_letters("sw.docs", 0, range(30)) + _letters("sw-docs", 3, range(5)))
    store.insert_dead_letters(_letters("sw.docs", 1, range(4)))  # stored now: kept
    d = dead_letters.c
    with store.engine.begin() as conn:
        conn.execute(sa.update(dead_letters).where(d.partition != 1).values(created_at=OLD))

    dry = store.prune(dead_letters_before=CUT, dry_run=True).deleted["dead_letters"]
    with statements(store.engine, "DELETE") as deletes:
        deleted = store.prune(dead_letters_before=CUT).deleted["dead_letters"]

    assert dry == deleted == 35
    with store.reading() as conn:
        left = conn.execute(sa.select(d.topic, d.partition, d.offset)).all()
    assert sorted(left) == [("sw.docs", 1, o) for o in range(4)]
    # the same statement each time, with its cut-off and batch size as parameters, never a
    # list of the keys it deletes; five full batches and one that finds none
    assert all(len(params) <= 3 for _, params in deletes), deletes[0]
    assert len({sql for sql, _ in deletes}) == 1
    assert len(deletes) == 6


def test_stored_dead_letters_asks_once_with_the_same_statement_for_any_number(store):
    store.insert_dead_letters(_letters("sw.docs", 0, range(0, 1500, 2)))
    store.insert_dead_letters(_letters("sw-docs.b", 2, range(3)))

    def ask(
        messages: list[tuple[str, int, int, bytes]],
    ) -> tuple[set[tuple[str, int, int, bytes]], list[tuple[str, Any]]]:
        with statements(store.engine, "SELECT") as selects:
            found = store.stored_dead_letters(messages)
        return found, selects

    few = [("sw.docs", 0, 4, b"payload 4"), ("sw.docs", 0, 5, b"payload 5")]
    few.append(("sw-docs.b", 2, 1, b"other bytes"))  # those coordinates, other bytes
    found, few_selects = ask(few)
    assert found == {("sw.docs", 0, 4, b"payload 4")}

    many = [("sw.docs", 0, o, f"payload {o}".encode()) for o in range(1500)]
    many += [("sw-docs.b", 2, o, f"payload {o}".encode()) for o in range(5)]
    many += [("sw.docs", 1, o, f"payload {o}".encode()) for o in range(10)]  # other partition
    found, many_selects = ask(many)
    stored = {("sw.docs", 0, o, f"payload {o}".encode()) for o in range(0, 1500, 2)}
    assert found == stored | {("sw-docs.b", 2, o, f"payload {o}".encode()) for o in range(3)}

    # one statement, of the same text and number of parameters for 3 keys and for 1,515
    assert len(few_selects) == len(many_selects) == 1
    assert few_selects[0][0] == many_selects[0][0]
    assert len(few_selects[0][1]) == len(many_selects[0][1]) <= 4

    assert ask([]) == (set(), [])


def test_stored_dead_letters_reads_them_by_primary_key(store):
    """Each key is looked up in the table's primary key, not the whole table read."""
    store.insert_dead_letters(_letters("sw.docs", 0, range(3000)))
    if store.engine.dialect.name == "postgresql":
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE dead_letters")
    with statements(store.engine, "SELECT") as selects:
        store.stored_dead_letters([("sw.docs", 0, o, b"") for o in range(10)])
    ((sql, params),) = selects
    with store.reading() as conn:
        if conn.dialect.name == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)
            plan = "\n".join(str(r[-1]) for r in rows)
            assert "SEARCH dead_letters USING INDEX sqlite_autoindex_dead_letters_1" in plan, plan
        else:
            plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql, params))
            assert "Index Scan using pk_dead_letters on dead_letters" in plan, plan
