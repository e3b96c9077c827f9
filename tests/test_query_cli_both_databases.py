"""The query CLI on SQLite and PostgreSQL: output as stored and strictly valid, snapshot export of
any array name, inverted ranges and a password with "@" as one-line errors."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import UTC, datetime

import numpy as np
import pytest
from sparsewatch.storage.store import Store

from tests.support.cli import run_cli

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def output(monkeypatch, capsys, url: str, *args: str) -> str:
    """The standard output of a query command that succeeds."""
    code, out, err = run_cli(monkeypatch, capsys, *args, "--database-url", url)
    assert code == 0, err
    return out


def _strict_json(text: str) -> object:
    """``text`` parsed as RFC 8259 JSON (Python's parser also takes NaN and Infinity)."""

    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_csv_and_json_carry_escape_sequences_as_stored(database_url, monkeypatch, capsys):
    """click.echo stripped ANSI sequences from output that is not a terminal: CSV lost them."""
    text = "red \x1b[31malert\x1b[0m, bell \x07 and\r\nnext line"
    with Store.open(database_url) as store, store.transaction() as tx:
        doc = {"stream": "s", "doc_id": "d\x1b[1m", "event_time": T0, "window_seq": 0}
        tx.insert_documents([{**doc, "novelty_score": 0.5, "text": text}])
    out = output(monkeypatch, capsys, database_url, "documents", "--format", "csv")
    (row,) = csv.DictReader(io.StringIO(out, newline=""))
    assert (row["doc_id"], row["text"]) == ("d\x1b[1m", text)
    out = output(monkeypatch, capsys, database_url, "documents", "--format", "json")
    assert [(r["doc_id"], r["text"]) for r in _strict_json(out)] == [("d\x1b[1m", text)]


def test_a_bare_carriage_return_is_quoted_in_csv(database_url, monkeypatch, capsys, tmp_path):
    """The csv module quotes only its line terminator's characters: with "\\n" a bare "\\r" went
    out unquoted and readers split the record there (the dead letter's base64 landed in a
    second row, under "topic")."""
    text = "old Mac line\rsecond line"
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            doc = {"stream": "s", "doc_id": "d\r1", "event_time": T0, "window_seq": 0}
            tx.insert_documents([{**doc, "novelty_score": 0.5, "text": text}])
        store.insert_dead_letters(
            [{"topic": "t", "partition": 0, "offset": 1, "reason": "a\rb", "payload": b"x\ry"}]
        )
    out = output(monkeypatch, capsys, database_url, "documents", "--format", "csv")
    (row,) = csv.DictReader(io.StringIO(out, newline=""))
    assert (row["doc_id"], row["text"]) == ("d\r1", text)
    out = output(monkeypatch, capsys, database_url, "dead-letters", "--format", "csv")
    (row,) = csv.DictReader(io.StringIO(out, newline=""))
    assert (row["reason"], row["payload_utf8"], row["payload_base64"]) == ("a\rb", "x\ry", "eA15")
    assert out.count("\n") == 2  # header, record, each on a line ending in "\n" (no "\r\n")


def test_json_output_is_strict_json_with_null_for_infinities(database_url, monkeypatch, capsys):
    """json.dumps wrote Infinity and NaN, which JSON parsers (jq, JavaScript) refuse."""
    with Store.open(database_url) as store, store.transaction() as tx:
        tx.insert_documents(
            [
                {
                    "stream": "s",
                    "doc_id": "d",
                    "event_time": T0,
                    "window_seq": 0,
                    "novelty_score": math.inf,
                }
            ]
        )
        tx.insert_alerts(
            [
                {
                    "kind": "anomaly",
                    "stream": "s",
                    "subject_id": "d",
                    "score": -math.inf,
                    "window_seq": 0,
                    "event_time": T0,
                    "summary": "x",
                }
            ]
        )
        terms = [["a", math.nan], ["b", math.inf], ["c", 0.5]]
        topic = {"stream": "s", "window_seq": 0, "topic_id": 0, "strength": 1.0, "emerging": True}
        tx.upsert_topics([{**topic, "terms": terms}])
        tx.put_snapshot("s", 0, "k", {"A": np.zeros(2)}, {"lambda": math.nan}, 0)
    expected = {
        "documents": ("novelty_score", None),
        "alerts": ("score", None),
        "topics": ("terms", [["a", None], ["b", None], ["c", 0.5]]),
    }
    for command, (key, value) in expected.items():
        out = output(monkeypatch, capsys, database_url, command, "--format", "json")
        assert _strict_json(out)[0][key] == value
    out = output(monkeypatch, capsys, database_url, "topics", "--format", "csv")
    (row,) = csv.DictReader(io.StringIO(out, newline=""))
    assert _strict_json(row["terms"]) == [["a", None], ["b", None], ["c", 0.5]]
    out = output(monkeypatch, capsys, database_url, "snapshots", "list", "--format", "json")
    assert _strict_json(out)[0]["meta"] == {"lambda": None}


def test_export_writes_arrays_named_like_savez_arguments(
    database_url, monkeypatch, capsys, tmp_path
):
    """np.savez(fh, **arrays): an array named "file" was a TypeError, one named "allow_pickle"
    was taken for that flag and silently left out of the file; a NaN in the metadata made the
    .json file invalid JSON."""
    arrays = {"file": np.arange(3.0), "allow_pickle": np.ones((2, 2), np.float32), "A": np.eye(2)}
    with Store.open(database_url) as store, store.transaction() as tx:
        tx.put_snapshot("s", 0, "dictionary", arrays, {"k": 2, "lambda": math.nan}, 0)
    out_path = tmp_path / "snap.npz"
    output(monkeypatch, capsys, database_url, "snapshots", "export", "s", "dictionary", "-o",
           str(out_path))  # fmt: skip
    with np.load(out_path, allow_pickle=False) as npz:
        assert sorted(npz.files) == sorted(arrays)
        for name, array in arrays.items():
            assert npz[name].dtype == array.dtype and npz[name].tobytes() == array.tobytes()
    meta = _strict_json(out_path.with_suffix(".json").read_text())
    assert meta["meta"] == {"k": 2, "lambda": None} and meta["window_seq"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("documents", "--since", "1h", "--until", "2h"), "--since must be before --until"),
        (
            ("documents", "--since", "2024-03-01T12:00:00Z", "--until", "2024-03-01T12:00:00Z"),
            "--since must be before --until",
        ),
        (("topics", "--from-window", "3", "--to-window", "1"), "--from-window must not be after"),
        (("topics", "--window", "1", "--from-window", "0"), "--window or --from-window"),
        (("topics", "--window", "1", "--to-window", "5"), "--window or --from-window"),
    ],
)
def test_inverted_or_conflicting_ranges_are_one_line_errors(
    args, message, monkeypatch, capsys, tmp_path
):
    """documents accepted an empty time range and topics an empty or overridden window range:
    an empty result, as if nothing had been stored."""
    url = f"sqlite:///{tmp_path / 'never-opened.db'}"
    code, out, err = run_cli(monkeypatch, capsys, *args, "--database-url", url)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not (tmp_path / "never-opened.db").exists()


def test_an_unencoded_at_sign_in_the_password_is_not_shown(monkeypatch, capsys):
    """The error named host 'cret@127.0.0.1' and showed the URL as u:***@cret@127.0.0.1."""
    url = "postgresql+psycopg://u:se@cret@127.0.0.1:1/x"
    code, out, err = run_cli(monkeypatch, capsys, "alerts", "--database-url", url)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: cannot open database postgresql+psycopg://u:***@127.0.0.1:1/x: ")
    assert "cret" not in err


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u:pw@127.0.0.1:1/x",
        "postgresql+psycopg2://u:pw@127.0.0.1:1/x",
        "postgresql+asyncpg://u:pw@127.0.0.1:1/x",
        "oracle://u:pw@127.0.0.1:1/x",
    ],
)
def test_an_unsupported_database_is_a_one_line_error(url, monkeypatch, capsys):
    """A MySQL URL or another PostgreSQL driver ended in "ModuleNotFoundError: No module named
    'MySQLdb'" (exit 1): nothing said that sparsewatch does not store results there."""
    code, out, err = run_cli(monkeypatch, capsys, "alerts", "--database-url", url)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: unsupported database ") and "pw" not in err
    assert "sqlite:///" in err and "postgresql+psycopg://" in err


def test_libpq_style_postgresql_urls_use_the_shipped_driver(postgres_database, monkeypatch, capsys):
    """``postgresql://`` (libpq's spelling) means psycopg 3, as ``postgresql+psycopg://`` does,
    whatever SQLAlchemy's default driver (psycopg2, not installed, before SQLAlchemy 2.1)."""
    url, _ = postgres_database
    plain = url.replace("postgresql+psycopg://", "postgresql://", 1)
    assert plain != url
    code, _, err = run_cli(monkeypatch, capsys, "db", "upgrade", "--database-url", plain)
    assert code == 0, err
    assert json.loads(output(monkeypatch, capsys, plain, "alerts", "--format", "json")) == []
    with Store.open(url, create=False) as store:  # the same database
        assert store.revision() is not None


def test_a_query_creates_no_sqlite_file_uri_database(tmp_path, monkeypatch, capsys):
    """``sqlite:///file:PATH?uri=true`` skipped the existence check: the query created the file
    (and answered with an empty table) although query commands create nothing."""
    path = tmp_path / "uri.db"
    for url in (f"sqlite:///file:{path}?uri=true", f"sqlite:///file://{path}?uri=true"):
        code, out, err = run_cli(monkeypatch, capsys, "alerts", "--database-url", url)
        assert (
            code == 2
            and out == ""
            and err == f"error: no database at {path}: " + err.split(": ", 2)[2]
        )
        assert not path.exists()
    code, _, err = run_cli(monkeypatch, capsys, "db", "upgrade", "--database-url", url)
    assert code == 0 and path.is_file(), err
    assert json.loads(output(monkeypatch, capsys, url, "alerts", "--format", "json")) == []
