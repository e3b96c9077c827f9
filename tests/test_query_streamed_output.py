"""``documents`` and ``alerts`` as JSON or CSV are read and written a batch of rows at a time:
the same bytes as the whole listing built in memory (which took 5.5-6 times the output's size:
836 MB for a 142 MB export), in one consistent snapshot, quiet when the reader goes away, and
with a peak memory that does not grow with the output, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sparsewatch.storage import alert_queries, query_parts
from sparsewatch.storage.store import Store

from sparsewatch.commands_query import ALERT_COLUMNS, DOCUMENT_COLUMNS
from sparsewatch.query_output import csv_cells, csv_lines, json_row
from tests.support.cli import limit_note, run_cli

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def _whole(rows: list[dict[str, Any]], fmt: str, columns: tuple[str, ...]) -> str:
    """What the query commands printed before: the whole text built at once."""
    if fmt == "json":
        data = [json_row(row, columns) for row in rows]
        text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    else:
        text = csv_lines([columns, *(csv_cells(row, columns) for row in rows)])
    return text + "\n"


def _fill(url: str) -> None:
    """Documents and alerts with ties (one event time, one score, one creation time: a
    transaction's), NULLs, infinite numbers, odd text (quotes, line breaks, non-ASCII, case
    and punctuation that collations order differently)."""
    ids = ["B", "a", "-x", "b", "ä", 'q"1', "line\nbreak", "cr\rx", "ü,x", "Z"]
    docs = []
    for i, doc_id in enumerate(ids * 3):
        untimed = i % 5 == 4
        docs.append(
            {
                "stream": ("s", "S", "t-1")[i % 3],
                "doc_id": f"{doc_id}{i // len(ids)}",
                "event_time": None if untimed else T0 + timedelta(minutes=i // 4),
                "window_seq": 0 if untimed else i // 10,
                "novelty_score": (0.5, float("inf"), None, 0.25)[i % 4],
                "reconstruction_error": None if i % 3 else 0.125,
                "novel": (True, False, None)[i % 3],
                "late": False,
                "dominant_topic": i % 2 or None,
                "emerging_topic": None,
                "top_atoms": [] if i % 2 else [1, 2],
                "labels": ["x"] if i % 4 == 0 else [],
                "text": None if i % 7 == 6 else f'text {doc_id} "quoted", zürich\n{i}',
            }
        )
    alerts = [
        {
            "kind": ("novel_document", "anomaly")[i % 2],
            "stream": ("s", "t")[i % 2],
            "subject_id": f"d{i}",
            "score": (0.5, 0.5, float("inf"), 0.75)[i % 4],
            "window_seq": i // 4,
            "event_time": None if i % 5 == 0 else T0 + timedelta(minutes=i // 3),
            "summary": f'story {i} {"Zeta" if i % 3 else "beta"}, "q"\r\n',
            "terms": [["volcano", 0.5], ["lava", float("nan")]] if i % 2 == 0 else [],
            "n_documents": None if i % 2 else i,
            "related_ids": [f"d{i}", "é"] if i % 3 == 0 else None,
        }
        for i in range(24)
    ]
    # a document without an event time: scored by a lagging anomaly worker, never detected
    untimed = [d for d in docs if d["event_time"] is None]
    scores = [
        {**d, "anomaly_score": (0.5, float("-inf"))[i % 2], "anomaly": bool(i % 2)}
        for i, d in enumerate(untimed + docs[:6])
    ]
    with Store.open(url) as store:
        with store.transaction() as tx:
            tx.insert_documents([d for d in docs if d["event_time"] is not None])
            tx.upsert_anomaly_scores(scores)
            tx.insert_alerts(alerts[:12])
        with store.transaction() as tx:
            tx.insert_alerts(alerts[12:])


DOCUMENT_QUERIES = [
    ({}, []),
    ({"limit": 7}, ["--limit", "7"]),
    ({"limit": 0}, ["--limit", "0"]),
    ({"limit": 1000}, ["--limit", "1000"]),
    ({"text": "ZÜRICH", "limit": 5}, ["--grep", "ZÜRICH", "--limit", "5"]),
    ({"streams": ["nothing"]}, ["--stream", "nothing"]),
]
ALERT_QUERIES = [
    ({}, []),
    ({"limit": 5}, ["--limit", "5"]),
    ({"limit": 0}, ["--limit", "0"]),
    ({"time_field": "event", "limit": 1000}, ["--by", "event", "--limit", "1000"]),
    ({"time_field": "event", "limit": 21}, ["--by", "event", "--limit", "21"]),
    ({"time_field": "event", "limit": 4}, ["--by", "event", "--limit", "4"]),
    ({"text": "zeta", "limit": 1000}, ["--grep", "zeta", "--limit", "1000"]),
    ({"text": "zeta", "limit": 2}, ["--grep", "zeta", "--limit", "2"]),
    (
        {"text": "zeta", "time_field": "event", "limit": 12},
        ["--grep", "zeta", "--by", "event", "--limit", "12"],
    ),
]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_streamed_output_is_the_whole_text_byte_for_byte(
    database_url, monkeypatch, capsys, fmt
) -> None:
    """JSON and CSV of ``documents`` and ``alerts``, written as their rows are read (a batch of
    2 at a time here), are the text the whole listing gave, limit note included; ``--grep``
    with a probe of the newest 5 alerts (then the rest of the table from where it ended)."""
    _fill(database_url)
    monkeypatch.setattr(query_parts, "STREAM_BATCH_ROWS", 2)
    monkeypatch.setattr(alert_queries, "GREP_PROBE_ROWS", 5)
    db = ["--database-url", database_url]
    cases = [
        ("documents", DOCUMENT_COLUMNS, Store.documents, DOCUMENT_QUERIES),
        ("alerts", ALERT_COLUMNS, Store.alerts, ALERT_QUERIES),
    ]
    for command, columns, query, filters_and_args in cases:
        for filters, args in filters_and_args:
            limit = filters.get("limit", 50)
            with Store.open(database_url) as store:
                rows = query(store, **{**filters, "limit": limit + 1})
            code, out, err = run_cli(monkeypatch, capsys, command, *args, "--format", fmt, *db)
            assert code == 0, err
            assert out == _whole(rows[:limit], fmt, columns), (command, args)
            assert err == (limit_note(limit, command) if len(rows) > limit else "")


def test_streamed_alerts_are_the_fetched_ones(database_url, monkeypatch) -> None:
    """:func:`alert_queries.stream_alerts` gives :func:`alert_queries.fetch_alerts`'s rows in its
    order for every limit, both times and with a grep probe that holds some, all or none of
    the matches."""
    _fill(database_url)
    monkeypatch.setattr(query_parts, "STREAM_BATCH_ROWS", 3)
    with Store.open(database_url) as store, store.reading() as conn:
        for probe in (1, 5, 10_000):
            monkeypatch.setattr(alert_queries, "GREP_PROBE_ROWS", probe)
            for time_field in ("created", "event"):
                for text in (None, "zeta", "BETA"):
                    for limit in (None, 0, 1, 3, 8, 19, 20, 24, 30):
                        filters = {"time_field": time_field, "text": text, "limit": limit}
                        expected = alert_queries.fetch_alerts(conn, **filters)
                        got = list(alert_queries.stream_alerts(conn, **filters))
                        assert got == expected, filters


def test_a_streamed_listing_is_one_snapshot(database_url) -> None:
    """``alerts --by event`` reads the alerts with an event time, then those without: an alert
    committed meanwhile is in neither (the whole listing is one read-only transaction, open
    while it is printed)."""
    _fill(database_url)
    late = {"kind": "anomaly", "stream": "s", "score": 9.0, "summary": "x", "window_seq": 0}
    with Store.open(database_url) as store, Store.open(database_url) as writer:
        with store.streamed_alerts(time_field="event", limit=None) as rows:
            first = next(rows)
            with writer.transaction() as tx:
                tx.insert_alerts([{**late, "subject_id": "late0", "event_time": None}])
                tx.insert_alerts([{**late, "subject_id": "late1", "event_time": T0}])
            seen = [first, *rows]
        assert len(seen) == 24
        assert not [r for r in seen if r["subject_id"].startswith("late")]
        assert len(store.alerts(limit=None)) == 26


def _big_database(url: str, n: int, text_bytes: int = 1000) -> None:
    """``n`` documents of ``text_bytes`` of text each."""
    text = ("lorem ipsum " * (text_bytes // 12 + 1))[:text_bytes]
    with Store.open(url) as store:
        for first in range(0, n, 5000):
            with store.transaction() as tx:
                tx.insert_documents(
                    [
                        {
                            "stream": "s",
                            "doc_id": f"d{i:06d}",
                            "event_time": T0 + timedelta(seconds=i),
                            "window_seq": i // 1000,
                            "novelty_score": 0.1,
                            "top_atoms": [1, 2, 3],
                            "labels": [],
                            "text": text,
                        }
                        for i in range(first, min(first + 5000, n))
                    ]
                )


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_reader_gone_mid_stream_ends_it_quietly(database_url, fmt) -> None:
    """``sparsewatch documents ... | head``: the reader closes the pipe after the first bytes,
    or before any; the command stops reading and ends with status 0, nothing on stderr."""
    _big_database(database_url, 3000)
    args = ["documents", "--limit", "5000", "--format", fmt, "--database-url", database_url]
    env = {k: v for k, v in os.environ.items() if k != "SPARSEWATCH_DEBUG"}
    for read in (100, 0):
        child = subprocess.Popen(
            [sys.executable, "-m", "sparsewatch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None and child.stderr is not None
        if read:
            assert len(child.stdout.read(read)) == read
        child.stdout.close()
        err = child.stderr.read()
        assert child.wait(timeout=60) == 0, err
        assert err == b""


# Run in a child of its own, whose only child is the command: RUSAGE_CHILDREN's peak is then the
# command's (that of this test process holds every child it ever waited for).
_PEAK = textwrap.dedent(
    """
    import resource, subprocess, sys
    with open(sys.argv[1], "wb") as out:
        status = subprocess.run(sys.argv[2:], stdout=out, stderr=subprocess.DEVNULL).returncode
    print(status, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    """
)


def _peak_rss(output: Path, *args: str) -> tuple[int, int]:
    """The bytes ``sparsewatch ARGS`` prints (to ``output``) and its peak RSS in bytes."""
    command = [sys.executable, "-m", "sparsewatch", *args]
    env = {k: v for k, v in os.environ.items() if k != "SPARSEWATCH_DEBUG"}
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, str(output), *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    status, kib = map(int, done.stdout.split())
    assert status == 0, done
    return output.stat().st_size, kib * 1024


@pytest.mark.slow
def test_an_export_s_peak_memory_does_not_grow_with_its_size(database_url, tmp_path) -> None:
    """50,000 documents of 1 KB (a 55 MB CSV, 70 MB of JSON): the command's peak RSS exceeds
    that of a one-row listing by well under the output's size (it grew by 5 times the output,
    260-350 MB, when the rows and the text were built whole; a batch of rows now)."""
    _big_database(database_url, 50_000)
    db = ["--database-url", database_url]
    _, baseline = _peak_rss(tmp_path / "one", "documents", "--limit", "1", "--format", "json", *db)
    for fmt in ("csv", "json"):
        size, peak = _peak_rss(
            tmp_path / fmt, "documents", "--limit", "50000", "--format", fmt, *db
        )
        assert size > 50_000_000
        growth = peak - baseline
        assert growth < size / 5, (fmt, size, peak, baseline)
