"""Every query command in every output format, on populated SQLite and PostgreSQL databases."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from sparsewatch.storage import migrate
from sparsewatch.storage.store import _MISSING_HINT as MISSING_HINT
from sparsewatch.storage.store import Store

from sparsewatch.query_options import parse_time
from tests.support.cli import limit_note, run_cli
from tests.support.storage import novel_document_alerts

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
STREAMS = ("news", "tweets")
N_WINDOWS, N_DOCS = 3, 20
RNG_SEED = 7


def populate(url: str) -> dict:
    """Three windows of two streams: documents, alerts of every kind, topics, snapshots."""
    rng = np.random.default_rng(RNG_SEED)
    arrays = {}
    with Store.open(url) as store:
        for stream in STREAMS:
            for seq in range(N_WINDOWS):
                start = T0 + timedelta(hours=seq)
                docs = [
                    {
                        "stream": stream,
                        "doc_id": f"{stream}-{seq}-{i}",
                        "event_time": start + timedelta(minutes=i),
                        "window_seq": seq,
                        "novelty_score": float(rng.random()),
                        "reconstruction_error": float(rng.random()),
                        "novel": i % 5 == 0,
                        "late": False,
                        "dominant_topic": i % 3,
                        "top_atoms": [i, i + 1],
                        "labels": ["a", "b"] if i % 2 else [],
                        "text": f'story {i}, with a comma and "quotes"\nand a newline',
                    }
                    for i in range(N_DOCS)
                ]
                anomalies = [
                    {
                        "stream": stream,
                        "doc_id": d["doc_id"],
                        "anomaly_score": float(rng.normal()),
                        "anomaly": i % 7 == 0,
                    }
                    for i, d in enumerate(docs)
                ]
                alerts = novel_document_alerts(docs, summary_chars=30)
                alerts += [
                    {
                        "kind": "anomaly",
                        "stream": stream,
                        "subject_id": a["doc_id"],
                        "score": a["anomaly_score"],
                        "window_seq": seq,
                        "event_time": start,
                        "summary": "anomalous",
                    }
                    for a in anomalies
                    if a["anomaly"]
                ]
                alerts.append(
                    {
                        "kind": "emerging_topic",
                        "stream": stream,
                        "subject_id": f"w{seq}-t1",
                        "score": 2.5,
                        "window_seq": seq,
                        "event_time": start,
                        "summary": "new topic: volcano, ash",
                    }
                )
                topics = [
                    {
                        "stream": stream,
                        "window_seq": seq,
                        "topic_id": k,
                        "terms": [[f"w{k}{j}", 1.0 / (j + 1)] for j in range(6)],
                        "strength": float(k + 1),
                        "emerging": k == 1,
                    }
                    for k in range(3)
                ]
                arrays[(stream, seq)] = {
                    "D": rng.random((12, 4)).astype(np.float32),
                    "vocabulary": np.array(["ash", "volcano", "ünï"]),
                }
                with store.transaction() as tx:
                    tx.upsert_window(
                        stream, seq, start, start + timedelta(hours=1), N_DOCS, 0.9, {}, "watermark"
                    )
                    tx.insert_documents(docs)
                    tx.upsert_anomaly_scores(anomalies)
                    tx.insert_alerts(alerts)
                    tx.upsert_topics(topics)
                    tx.put_snapshot(stream, seq, "dictionary", arrays[(stream, seq)], {"k": 4}, seq)
    return arrays


@pytest.fixture
def populated(database_url):
    arrays = populate(database_url)
    return database_url, arrays


def query(monkeypatch, capsys, url: str, *args: str, cut: str | None = None) -> dict[str, object]:
    """The command's output in every format: parsed JSON, parsed CSV, table text; ``cut``: the
    rows it lists (``alerts``, ...), when ``--limit`` cuts the listing (a note on stderr)."""
    results: dict[str, object] = {}
    for fmt in ("json", "csv", "table"):
        code, out, err = run_cli(monkeypatch, capsys, *args, "--format", fmt, "--database-url", url)
        assert code == 0, err
        limit = int(args[args.index("--limit") + 1]) if "--limit" in args else 50
        assert err == ("" if cut is None else limit_note(limit, cut))
        results[fmt] = out
    results["json"] = json.loads(results["json"])
    results["csv"] = list(csv.DictReader(io.StringIO(results["csv"])))
    rows, table = results["json"], results["csv"]
    assert len(table) == len(rows)
    for j, c in zip(rows, table, strict=True):
        assert set(c) == set(j)
        for key, value in j.items():  # CSV carries the same values as text
            if isinstance(value, list | dict):
                assert json.loads(c[key]) == value
            elif value is None:
                assert c[key] == ""
            elif isinstance(value, bool):
                assert c[key] == str(value)
            elif isinstance(value, float):
                assert float(c[key]) == value
            else:
                assert c[key] == str(value)
    return results


def test_alerts_in_every_format_and_filter(populated, monkeypatch, capsys):
    url, _ = populated
    n_novel = N_WINDOWS * len(STREAMS) * 4
    everything = query(monkeypatch, capsys, url, "alerts", "--limit", "1000")
    rows = everything["json"]
    kinds = {r["kind"] for r in rows}
    assert kinds == {"novel_document", "anomaly", "emerging_topic"}
    assert sum(r["kind"] == "novel_document" for r in rows) == n_novel
    assert len({(r["kind"], r["stream"], r["subject_id"]) for r in rows}) == len(rows)
    assert f"alerts ({len(rows)})" in everything["table"]
    assert "new topic: volcano, ash" in everything["table"]
    keys = [(r["created_at"], r["score"]) for r in rows]
    assert keys == sorted(keys, reverse=True)

    novel = query(
        monkeypatch,
        capsys,
        url,
        "alerts",
        "--kind",
        "novel_document",
        "--stream",
        "news",
        "--min-score",
        "0.5",
        "--limit",
        "1000",
    )["json"]
    expected = [
        r
        for r in rows
        if r["kind"] == "novel_document" and r["stream"] == "news" and r["score"] >= 0.5
    ]
    assert 0 < len(expected) < N_WINDOWS * 4  # the score filter keeps some and drops some
    assert sorted(r["id"] for r in novel) == sorted(r["id"] for r in expected)
    kinds_two = query(
        monkeypatch, capsys, url, "alerts", "--kind", "anomaly", "--kind", "emerging_topic",
        "--limit", "1000",
    )["json"]  # fmt: skip
    assert sorted(r["id"] for r in kinds_two) == sorted(
        r["id"] for r in rows if r["kind"] in ("anomaly", "emerging_topic")
    )
    cut = query(monkeypatch, capsys, url, "alerts", "--limit", "3", cut="alerts")
    assert cut["json"] == rows[:3]

    recent = query(monkeypatch, capsys, url, "alerts", "--since", "1h", "--limit", "1000")["json"]
    assert len(recent) == len(rows)  # all were created just now
    assert query(monkeypatch, capsys, url, "alerts", "--until", "1h")["json"] == []
    by_event = query(
        monkeypatch, capsys, url, "alerts", "--by", "event",
        "--since", "2024-03-01T13:00:00Z", "--until", "2024-03-01T14:00:00", "--limit", "1000",
    )  # fmt: skip
    in_hour = [r for r in rows if r["event_time"].startswith("2024-03-01T13:")]
    assert in_hour and sorted(r["id"] for r in by_event["json"]) == sorted(r["id"] for r in in_hour)
    assert {r["window_seq"] for r in by_event["json"]} == {1}
    order = [(r["event_time"], r["score"]) for r in by_event["json"]]  # ordered by event time
    assert order == sorted(order, reverse=True)
    assert "event time" in by_event["table"]


def test_documents_in_every_format_and_filter(populated, monkeypatch, capsys):
    url, _ = populated
    window = query(monkeypatch, capsys, url, "documents", "--stream", "tweets", "--window", "1")
    rows = window["json"]
    assert [r["doc_id"] for r in rows] == [f"tweets-1-{i}" for i in range(N_DOCS)]
    assert rows[1]["labels"] == ["a", "b"] and rows[1]["top_atoms"] == [1, 2]
    assert rows[0]["text"].endswith("and a newline") and "\n" in rows[0]["text"]
    assert rows[0]["event_time"] == "2024-03-01T13:00:00Z"
    assert window["csv"][0]["text"] == rows[0]["text"]  # quoting survives commas and newlines
    assert "tweets-1-19" in window["table"] and f"documents ({N_DOCS})" in window["table"]

    novel = query(monkeypatch, capsys, url, "documents", "--novel", "--limit", "1000")["json"]
    assert len(novel) == N_WINDOWS * len(STREAMS) * 4 and all(r["novel"] for r in novel)
    times = [(r["event_time"], r["stream"], r["doc_id"]) for r in novel]
    assert times == sorted(times)
    anomalous = query(monkeypatch, capsys, url, "documents", "--anomalies", "--limit", "1000")
    assert all(r["anomaly"] and r["anomaly_score"] is not None for r in anomalous["json"])
    assert len(anomalous["json"]) == N_WINDOWS * len(STREAMS) * 3
    everything = query(monkeypatch, capsys, url, "documents", "--limit", "1000")["json"]
    assert len(everything) == N_WINDOWS * len(STREAMS) * N_DOCS
    scored = query(monkeypatch, capsys, url, "documents", "--min-score", "0.9", "--limit", "1000")
    expected = [r for r in everything if r["novelty_score"] >= 0.9]
    assert 0 < len(expected) < len(everything)
    assert scored["json"] == expected
    early = query(
        monkeypatch, capsys, url, "documents", "--until", "2024-03-01T12:05:00Z", "--limit", "1000"
    )["json"]
    assert len(early) == 5 * len(STREAMS)
    late = query(
        monkeypatch, capsys, url, "documents", "--stream", "news",
        "--since", "2024-03-01T14:15:00Z", "--limit", "1000",
    )["json"]  # fmt: skip
    assert [r["doc_id"] for r in late] == [f"news-2-{i}" for i in range(15, N_DOCS)]


def test_topics_in_every_format_and_filter(populated, monkeypatch, capsys):
    url, _ = populated
    result = query(monkeypatch, capsys, url, "topics", "--terms", "2", "--limit", "1000")
    rows = result["json"]
    assert len(rows) == N_WINDOWS * len(STREAMS) * 3
    assert all(len(r["terms"]) == 2 for r in rows)
    assert rows[0]["window_seq"] == N_WINDOWS - 1 and rows[0]["strength"] == 3.0
    assert "w20 (1.000), w21 (0.500)" in result["table"]
    emerging = query(monkeypatch, capsys, url, "topics", "--emerging", "--window", "1")["json"]
    assert [(r["stream"], r["topic_id"]) for r in emerging] == [("news", 1), ("tweets", 1)]
    ranged = query(
        monkeypatch,
        capsys,
        url,
        "topics",
        "--stream",
        "news",
        "--from-window",
        "1",
        "--limit",
        "100",
    )["json"]
    assert {r["window_seq"] for r in ranged} == {1, 2} and {r["stream"] for r in ranged} == {"news"}
    assert len(ranged) == 2 * 3
    first = query(monkeypatch, capsys, url, "topics", "--to-window", "0", "--limit", "100")["json"]
    assert len(first) == len(STREAMS) * 3 and {r["window_seq"] for r in first} == {0}
    strengths = [(r["stream"], r["strength"]) for r in first]  # strongest topic first
    assert strengths == [(s, float(k)) for s in STREAMS for k in (3, 2, 1)]
    cut = query(
        monkeypatch, capsys, url, "topics", "--to-window", "0", "--limit", "5", cut="topics"
    )
    assert cut["json"] == first[:5]
    whole = query(
        monkeypatch, capsys, url, "topics", "--to-window", "0", "--limit", str(len(first))
    )
    assert whole["json"] == first  # all of them, no note


def test_snapshots_list_and_export(populated, monkeypatch, capsys, tmp_path):
    url, arrays = populated
    listed = query(monkeypatch, capsys, url, "snapshots", "list", "--stream", "news")
    rows = listed["json"]
    assert [r["window_seq"] for r in rows] == [2, 1, 0]
    newest = query(
        monkeypatch,
        capsys,
        url,
        "snapshots",
        "list",
        "--stream",
        "news",
        "--limit",
        "2",
        cut="snapshots",
    )
    assert newest["json"] == rows[:2]
    assert rows[0]["shapes"]["D"] == {"dtype": "<f4", "shape": [12, 4]}
    assert rows[0]["size_bytes"] > 12 * 4 * 4
    assert "D 12x4 <f4" in listed["table"]
    out = tmp_path / "snap.npz"
    code, text, err = run_cli(
        monkeypatch, capsys, "snapshots", "export", "news", "dictionary", "--window", "1",
        "-o", str(out), "--database-url", url,
    )  # fmt: skip
    assert code == 0, err
    assert text.startswith(f"wrote {out}")
    with np.load(out, allow_pickle=False) as npz:
        for name, array in arrays[("news", 1)].items():
            assert npz[name].dtype == array.dtype and npz[name].tobytes() == array.tobytes()
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["window_seq"] == 1 and meta["meta"] == {"k": 4} and meta["vocabulary_version"] == 1
    code, _, err = run_cli(
        monkeypatch, capsys, "snapshots", "export", "news", "dictionary",
        "-o", str(out), "--database-url", url,
    )  # fmt: skip
    assert code == 0
    with np.load(out, allow_pickle=False) as npz:  # newest by default
        assert npz["D"].tobytes() == arrays[("news", 2)]["D"].tobytes()
    named_json = tmp_path / "snap.json"  # the metadata must not overwrite the arrays
    code, text, err = run_cli(
        monkeypatch, capsys, "snapshots", "export", "news", "dictionary", "-o", str(named_json),
        "--database-url", url,
    )  # fmt: skip
    assert code == 0, err
    assert text.rstrip().endswith(f"and {named_json}.json")
    with np.load(named_json, allow_pickle=False) as npz:
        assert npz["D"].tobytes() == arrays[("news", 2)]["D"].tobytes()
    assert json.loads(Path(f"{named_json}.json").read_text())["window_seq"] == 2
    code, _, err = run_cli(
        monkeypatch, capsys, "snapshots", "export", "news", "topics", "-o", str(out),
        "--database-url", url,
    )  # fmt: skip
    assert code == 2 and err == "error: no topics snapshot of stream 'news' (newest)\n"


def test_table_cells_are_shown_as_written_not_as_markup(database_url, monkeypatch, capsys):
    text = "x [/b] [bold]y[/bold] [red]"  # short: a folded cell would split it
    with Store.open(database_url) as store, store.transaction() as tx:
        tx.upsert_window("s", 0, T0, T0 + timedelta(hours=1), 1, 0.9, {}, "watermark")
        tx.insert_documents(
            [
                {
                    "stream": "s", "doc_id": "d0", "event_time": T0, "window_seq": 0,
                    "novelty_score": 0.9, "reconstruction_error": 0.9, "novel": True,
                    "late": False, "dominant_topic": 0, "top_atoms": [], "labels": [],
                    "text": text,
                }
            ]
        )  # fmt: skip
        tx.insert_alerts(
            [
                {
                    "kind": "novel_document", "stream": "s", "subject_id": "d0", "score": 0.9,
                    "window_seq": 0, "event_time": T0, "summary": text,
                }
            ]
        )  # fmt: skip
    for command in ("documents", "alerts"):
        code, out, err = run_cli(monkeypatch, capsys, command, "--database-url", database_url)
        assert code == 0, err
        assert text in out


def test_table_cells_never_reach_the_terminal_as_control_sequences(
    database_url, monkeypatch, capsys
):
    """A tweet's "\x1b]2;...\x07" retitled the analyst's terminal and "\x1b[41m" recoloured
    it: the alerts and documents tables printed ids, streams and texts raw. Now they show the
    sequences escaped, as dead-letters and status do; JSON and CSV keep the text as stored."""
    doc_id, stream, text = "evil\x1b[5m", "s\x1b[31m", "\x1b]2;pwned\x07\x1b[41mBREAK\x1b[0m"
    with Store.open(database_url) as store, store.transaction() as tx:
        tx.upsert_window(stream, 0, T0, T0 + timedelta(hours=1), 1, 0.9, {}, "watermark")
        tx.insert_documents(
            [
                {
                    "stream": stream, "doc_id": doc_id, "event_time": T0, "window_seq": 0,
                    "novelty_score": 0.9, "reconstruction_error": 0.9, "novel": True,
                    "late": False, "dominant_topic": 0, "top_atoms": [], "labels": [],
                    "text": text,
                }
            ]
        )  # fmt: skip
        tx.insert_alerts(
            [
                {
                    "kind": "novel_document", "stream": stream, "subject_id": doc_id,
                    "score": 0.9, "window_seq": 0, "event_time": T0, "summary": text,
                }
            ]
        )  # fmt: skip
    for command in ("documents", "alerts"):
        code, out, err = run_cli(monkeypatch, capsys, command, "--database-url", database_url)
        assert code == 0, err
        assert not any(c in out for c in "\x1b\x07"), command
        unfolded = "".join(line.strip("│ ") for line in out.splitlines())
        assert "evil\\x1b[5m" in unfolded and "pwned\\x07" in unfolded, command
        code, out, err = run_cli(
            monkeypatch, capsys, command, "--format", "json", "--database-url", database_url
        )
        stored = {row.get("text", row.get("summary")) for row in json.loads(out)}
        assert code == 0 and text in stored


def test_db_upgrade_from_empty(database_url, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "db", "upgrade", "--database-url", database_url)
    assert code == 0, err
    assert out.strip().endswith(f"is at revision {migrate.head_revision()}")
    engine = sa.create_engine(database_url)
    try:
        names = set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert {"documents", "windows", "alerts", "topics", "snapshots", "checkpoints"} <= names
    assert {"partition_offsets", "dead_letters", "sparsewatch_alembic_version"} <= names
    assert "alembic_version" not in names  # (another Alembic application's name)
    # An empty database answers queries (migrated on first use) with empty results.
    assert query(monkeypatch, capsys, database_url, "alerts")["json"] == []


@pytest.mark.parametrize(
    "command",
    [
        ("alerts",),
        ("alerts", "--follow"),
        ("documents",),
        ("topics",),
        ("snapshots", "list"),
        ("snapshots", "export", "news", "dictionary", "-o", "x.npz"),
    ],
)
def test_queries_create_no_database(command, database_url, monkeypatch, capsys, tmp_path):
    # A mistyped SQLite path used to become a new empty database (its folders too) and the
    # query an empty answer; an empty PostgreSQL database got sparsewatch's tables.
    missing = tmp_path / "typo" / "sparsewatch.db"
    code, out, err = run_cli(
        monkeypatch, capsys, *command, "--database-url", f"sqlite:///{missing}"
    )
    assert code == 2 and out == ""
    assert err == f"error: no database at {missing}: {MISSING_HINT}\n"
    assert not missing.parent.exists()
    if database_url.startswith("sqlite"):
        (tmp_path / "sparsewatch.db").touch()  # an empty file is an empty SQLite database
    code, out, err = run_cli(monkeypatch, capsys, *command, "--database-url", database_url)
    assert code == 2 and out == ""
    assert err.startswith("error: the database ") and "has no sparsewatch tables" in err
    assert err.count("\n") == 1
    engine = sa.create_engine(database_url)
    try:
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("alerts", "--since", "yesterday-ish"), "neither ISO-8601 nor relative"),
        (("alerts", "--since", "1h", "--until", "2h"), "--since must be before --until"),
        (("alerts", "--kind", "spam"), "'spam' is not one of"),
        (("documents", "--limit", "-1"), "--limit"),
        (("alerts", "--since", "99999999999d"), "'--since': '99999999999d' is outside the dates"),
        (("alerts", "--since", "0001-01-01T00:00:00+01:00"), "is outside the dates"),
        (("documents", "--until", "9999-12-31T23:59:59-01:00"), "'--until'"),
        (("documents", "--window", str(10**24)), "'--window'"),
        (("topics", "--from-window", str(2**63)), "'--from-window'"),
        (("alerts", "--limit", str(10**24)), "'--limit'"),
        (("snapshots", "export", "s", "k", "-o", "x.npz", "--window", str(2**63)), "'--window'"),
        (("alerts", "--format", "xml"), "'xml' is not one of"),
        # nan passes every range comparison: it used to be accepted and mean "no bound"
        (("alerts", "--min-score", "nan"), "'--min-score': 'nan' is not a finite number"),
        (("documents", "--min-score", "-inf"), "'--min-score': '-inf' is not a finite number"),
        (("replay", "x.jsonl", "--rate", "nan"), "'--rate': 'nan' is not a finite number"),
        (("replay", "x.jsonl", "--speedup", "inf"), "'--speedup': 'inf' is not a finite number"),
        (("replay", "x.jsonl", "--max-wait", "nan"), "'--max-wait'"),
        (("replay", "x.jsonl", "--connect-timeout", "nan"), "'--connect-timeout'"),
        (("replay", "x.jsonl", "--rate", "0"), "'--rate'"),
        (("run", "detector", "--until-idle", "nan"), "'--until-idle'"),
        (("kafka", "up", "--timeout", "nan"), "'--timeout'"),
        (("topics", "--database-url", "nosuchdb://x"), "unsupported database nosuchdb://x: "),
        # SQLAlchemy's ValueError / ArgumentError, not "cannot open database"; the URL is not
        # repeated (its password could not be masked)
        (
            ("alerts", "--database-url", "postgresql+psycopg://u:secret@h:abc/db"),
            "invalid database URL: invalid literal for int()",
        ),
        (("db", "upgrade", "--database-url", "notaurl"), "invalid database URL: Could not parse"),
        # an in-memory database is new and empty at every open: set up or read, it holds nothing
        (
            ("db", "upgrade", "--database-url", "sqlite:///:memory:"),
            "'sqlite:///:memory:' is an in-memory SQLite database",
        ),
        (("alerts", "--database-url", "sqlite://"), "'sqlite://' is an in-memory SQLite database"),
        # ... also written as a URI (db upgrade reported success on a database gone at exit)
        (
            ("db", "upgrade", "--database-url", "sqlite:///file::memory:?uri=true"),
            "is an in-memory SQLite database",
        ),
        (
            ("db", "upgrade", "--database-url", "sqlite:///file:x?mode=memory&uri=true"),
            "is an in-memory SQLite database",
        ),
        # uri=true with a plain path: SQLite created a file named "x.db?mode=ro" and used it
        (
            ("alerts", "--database-url", "sqlite:///x.db?mode=ro&uri=true"),
            "with uri=true the database must be a file: URI",
        ),
        (
            ("db", "upgrade", "--database-url", "sqlite:///x.db?mode=ro&uri=true"),
            "with uri=true the database must be a file: URI",
        ),
        # --database-url replaces the configured URL, not the check of the configuration
        (
            ("--config", "/nonexistent/sw.toml", "alerts", "--database-url", "sqlite://"),
            "configuration file /nonexistent/sw.toml does not exist",
        ),
        (
            ("alerts", "--database-url", "postgresql+psycopg://u:secret@127.0.0.1:1/x"),
            "cannot open database postgresql+psycopg://u:***@127.0.0.1:1/x",
        ),
    ],
)
def test_bad_arguments_and_unreachable_database_are_one_line_errors(
    args, message, monkeypatch, capsys
):
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert "secret" not in err


def test_the_largest_window_and_limit_are_valid_queries(populated, monkeypatch, capsys):
    url, _ = populated
    top = str(2**63 - 1)
    assert query(monkeypatch, capsys, url, "documents", "--window", top)["json"] == []
    assert query(monkeypatch, capsys, url, "topics", "--from-window", top)["json"] == []
    assert len(query(monkeypatch, capsys, url, "alerts", "--limit", top)["json"]) > 0


def test_relative_and_absolute_times():
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert parse_time("2h", now) == now - timedelta(hours=2)
    assert parse_time("30m", now) == now - timedelta(minutes=30)
    assert parse_time("1.5d ago", now) == now - timedelta(days=1.5)
    assert parse_time("now", now) == now
    assert parse_time("2024-05-01T14:00:00+02:00", now) == now
    assert parse_time("2024-05-01 12:00", now) == now
    with pytest.raises(ValueError):
        parse_time("2 fortnights", now)
    assert parse_time("0001-01-01T00:00:00Z", now) == datetime(1, 1, 1, tzinfo=UTC)
    for text in ("0001-01-01T00:59:59+01:00", "9999-12-31T23:00:00-01:00", "3000000d"):
        with pytest.raises(ValueError, match="outside the dates"):
            parse_time(text, now)


@pytest.mark.parametrize("folder", ["dir?x=1", "a%2Fb", "d#frag", "spaced dir", "~/sw-home"])
def test_the_default_database_is_where_data_dir_says(folder, tmp_path, monkeypatch, capsys):
    """The default SQLite URL was ``sqlite:///<data_dir>/sparsewatch.db`` written as a string: a
    ``?`` in a folder name started the URL's query (the file became ``<tmp>/dir``), ``%2F`` was
    decoded into a sub-folder, ``#`` cut the path; ``~`` was a folder in the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    data_dir = folder if folder.startswith("~") else str(tmp_path / folder)
    monkeypatch.setenv("SPARSEWATCH_DATA_DIR", data_dir)
    code, out, err = run_cli(monkeypatch, capsys, "db", "upgrade")
    assert code == 0, err
    expected = Path(data_dir).expanduser() / "sparsewatch.db"
    assert expected.is_file()
    created = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert created == [expected.relative_to(tmp_path)]
    code, out, err = run_cli(monkeypatch, capsys, "alerts", "--format", "json")
    assert (code, json.loads(out)) == (0, [])
