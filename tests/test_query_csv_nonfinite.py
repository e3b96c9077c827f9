"""CSV and JSON output agree on numbers JSON cannot hold: an infinite or NaN score is ``null`` in
JSON and an empty cell in CSV (as ``null`` is), on SQLite and PostgreSQL. CSV wrote ``inf``,
``-inf`` and (PostgreSQL keeps NaN, SQLite stores NULL) ``nan``, while a JSON cell of the same
CSV (a topic's terms) already held ``null``."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import UTC, datetime

import pytest
from sparsewatch.storage.store import Store

from sparsewatch.query_output import cell
from tests.support.cli import run_cli

T0 = datetime(2024, 3, 1, tzinfo=UTC)


# NaN only where a column may be NULL: the store refuses it in a NOT NULL one
VALUES = [math.inf, -math.inf, math.nan, 0.25]
NOT_NULL_VALUES = [math.inf, -math.inf, 0.5, 0.25]


def populate(url: str) -> None:
    values = VALUES
    docs = [
        {
            "stream": "s",
            "doc_id": f"d{i}",
            "event_time": T0,
            "window_seq": 0,
            "novelty_score": v,
            "reconstruction_error": v,
        }
        for i, v in enumerate(values)
    ]
    alerts = [
        {
            "kind": "anomaly",
            "stream": "s",
            "subject_id": f"d{i}",
            "score": v,
            "window_seq": 0,
            "event_time": T0,
            "summary": "x",
        }
        for i, v in enumerate(NOT_NULL_VALUES)
    ]
    topics = [
        {"stream": "s", "window_seq": 0, "topic_id": i, "strength": v, "emerging": False}
        | {"terms": [["a", v]]}
        for i, v in enumerate(NOT_NULL_VALUES)
    ]
    with Store.open(url) as store, store.transaction() as tx:
        tx.insert_documents(docs)
        tx.insert_alerts(alerts)
        tx.upsert_topics(topics)


def formats(monkeypatch, capsys, url: str, command: str) -> tuple[list[dict], list[dict]]:
    out = {}
    for fmt in ("json", "csv"):
        code, text, err = run_cli(
            monkeypatch, capsys, command, "--format", fmt, "--database-url", url
        )
        assert code == 0 and err == "", err
        out[fmt] = text
    as_json = json.loads(out["json"])
    as_csv = list(csv.DictReader(io.StringIO(out["csv"], newline="")))
    return as_json, as_csv


@pytest.mark.parametrize(
    ("command", "key", "columns"),
    [
        ("documents", "doc_id", ("novelty_score", "reconstruction_error")),
        ("alerts", "subject_id", ("score",)),
        ("topics", "topic_id", ("strength",)),
    ],
)
def test_csv_writes_an_empty_cell_where_json_writes_null(
    database_url, command, key, columns, monkeypatch, capsys
):
    populate(database_url)
    as_json, as_csv = formats(monkeypatch, capsys, database_url, command)
    assert len(as_json) == len(as_csv) == 4
    by_key = {str(r[key]): r for r in as_json}
    for row in as_csv:
        for column in columns:
            value = by_key[row[key]][column]
            assert row[column] == ("" if value is None else repr(value)), (row[key], column)
    finite = ["0.25"] if command == "documents" else ["0.25", "0.5"]
    assert sorted(row[columns[0]] for row in as_csv) == [""] * (4 - len(finite)) + finite


def test_cell_of_a_non_finite_number_is_empty():
    assert [cell(v) for v in (math.inf, -math.inf, math.nan, None)] == ["", "", "", ""]
    assert [cell(v) for v in (0.25, -0.0, 1e300, 3)] == ["0.25", "-0.0", "1e+300", "3"]
