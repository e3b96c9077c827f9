"""``sparsewatch dead-letters`` on real SQLite and PostgreSQL: the refused messages with their
reasons and exact bytes, filtered, and counted by reason."""

from __future__ import annotations

import base64
import csv
import io
import json
import time

import pytest
from sparsewatch.storage.store import Store

from tests.support.cli import limit_note, run_cli

DOCS, SCORES = "sw.docs", "sw.scores"
# Three transactions (three stored times), oldest first.
BATCHES = [
    [
        (DOCS, 0, 10, "invalid JSON: Expecting value at line 1 col 1", b"{not json"),
        (DOCS, 0, 11, "not UTF-8 (byte 0)", b"\xff\xfe\x00"),
        (DOCS, 1, 10, "missing field 'text'", '{"id": "zß"}'.encode()),
    ],
    [
        (DOCS, 0, 12, "duplicate of the document at partition 0, offset 3", b'{"id": "b"}'),
        (DOCS, 0, 13, "duplicate of the document at partition 0, offset 7", b'{"id": "c"}'),
        (SCORES, 2, 5, "missing field 'scores'", b'{"x": 1}\n\x1b[31m'),
    ],
    [
        (DOCS, 1, 11, "100% of_it: invalid JSON: Expecting value at line 2 col 9", b"\n"),
    ],
]


@pytest.fixture
def populated(database_url: str) -> str:
    with Store.open(database_url) as store:
        for batch in BATCHES:
            with store.transaction() as tx:
                tx.insert_dead_letters(
                    [
                        {"topic": t, "partition": p, "offset": o, "reason": r, "payload": b}
                        for t, p, o, r, b in batch
                    ]
                )
            time.sleep(0.01)  # distinct stored times
    return database_url


def as_json(monkeypatch, capsys, url: str, *args: str, cut: str | None = None) -> list[dict]:
    """The rows in JSON; ``cut``: what they are, when ``--limit`` cuts them (a note)."""
    code, out, err = run_cli(monkeypatch, capsys, "dead-letters", *args, "--format", "json",
                             "--database-url", url)  # fmt: skip
    limit = int(args[args.index("--limit") + 1]) if "--limit" in args else 50
    assert code == 0 and err == ("" if cut is None else limit_note(limit, cut)), err
    return json.loads(out)


def test_every_dead_letter_newest_first_with_its_exact_bytes(populated, monkeypatch, capsys):
    rows = as_json(monkeypatch, capsys, populated)
    expected = [m for batch in reversed(BATCHES) for m in sorted(batch)]
    assert [(r["topic"], r["partition"], r["offset"]) for r in rows] == [m[:3] for m in expected]
    for row, (_, _, _, reason, payload) in zip(rows, expected, strict=True):
        assert row["reason"] == reason
        assert base64.b64decode(row["payload_base64"]) == payload
        assert row["payload_bytes"] == len(payload)
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        assert row["payload_utf8"] == text
    assert sum(r["payload_utf8"] is None for r in rows) == 1
    code, out, err = run_cli(monkeypatch, capsys, "dead-letters", "--format", "csv",
                             "--database-url", populated)  # fmt: skip
    assert code == 0 and err == ""
    table = list(csv.DictReader(io.StringIO(out)))
    assert [base64.b64decode(r["payload_base64"]) for r in table] == [m[4] for m in expected]


def test_filters(populated, monkeypatch, capsys):
    def offsets(*args: str, cut: str | None = None) -> list[tuple[str, int, int]]:
        return [(r["topic"], r["partition"], r["offset"])
                for r in as_json(monkeypatch, capsys, populated, *args, cut=cut)]  # fmt: skip

    assert offsets("--topic", SCORES) == [(SCORES, 2, 5)]
    assert len(offsets("--topic", SCORES, "--topic", DOCS)) == 7
    # any case; % and _ are plain characters, not LIKE wildcards
    assert offsets("--reason", "INVALID json") == [(DOCS, 1, 11), (DOCS, 0, 10)]
    assert offsets("--reason", "100% of_it") == [(DOCS, 1, 11)]
    assert offsets("--reason", "1_0") == []  # as a LIKE pattern it matched "100"
    assert offsets("--reason", "%of") == []  # ... and this every reason with "of"
    assert offsets("--limit", "2", cut="dead letters") == [(DOCS, 1, 11), (DOCS, 0, 12)]
    newest = as_json(monkeypatch, capsys, populated, "--limit", "1", cut="dead letters")
    newest = newest[0]["created_at"]
    assert offsets("--since", newest) == [(DOCS, 1, 11)]
    assert len(offsets("--until", newest)) == 6
    assert offsets("--since", "1h", "--until", "now") == offsets()


def test_summary_counts_by_reason_with_numbers_as_n(populated, monkeypatch, capsys):
    rows = as_json(monkeypatch, capsys, populated, "--summary")
    summary = {r["reason"]: (r["count"], r["topics"], r["example"]) for r in rows}
    assert summary == {
        "duplicate of the document at partition N, offset N": (
            2,
            [DOCS],
            "duplicate of the document at partition 0, offset 7",
        ),
        "missing field 'text'": (1, [DOCS], "missing field 'text'"),
        "missing field 'scores'": (1, [SCORES], "missing field 'scores'"),
        "invalid JSON: Expecting value at line N col N": (
            1,
            [DOCS],
            "invalid JSON: Expecting value at line 1 col 1",
        ),
        "N% of_it: invalid JSON: Expecting value at line N col N": (
            1,
            [DOCS],
            "100% of_it: invalid JSON: Expecting value at line 2 col 9",
        ),
        "not UTF-8 (byte N)": (1, [DOCS], "not UTF-8 (byte 0)"),
    }
    assert rows[0]["count"] == 2  # most frequent first
    assert all(r["first_at"] <= r["last_at"] for r in rows)
    by_reason = {r["reason"]: r for r in rows}
    assert (
        by_reason["missing field 'text'"]["first_at"]
        < by_reason["missing field 'scores'"]["first_at"]
    )
    assert (
        len(as_json(monkeypatch, capsys, populated, "--summary", "--limit", "2", cut="reasons"))
        == 2
    )
    assert [r["count"] for r in as_json(monkeypatch, capsys, populated, "--summary",
                                        "--reason", "duplicate")] == [2]  # fmt: skip


def test_table_shows_escaped_previews(populated, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "dead-letters", "--database-url", populated)
    assert code == 0 and err == ""
    assert "dead letters (7)" in out
    assert "<3 bytes, not UTF-8>" in out
    assert "\x1b" not in out and "\\x1b[31m" in out  # an escape sequence is shown, not obeyed
    assert '{"id": "zß"}' in out  # letters beyond ASCII are shown as they are
    assert f"{SCORES}:2:5" in out
    code, out, err = run_cli(monkeypatch, capsys, "dead-letters", "--summary",
                             "--database-url", populated)  # fmt: skip
    assert code == 0 and "dead-letter reasons (6)" in out


def test_bad_arguments_are_one_line_errors(populated, monkeypatch, capsys):
    for args in (("--since", "2h", "--until", "3h"), ("--limit", "-1"), ("--format", "xml")):
        code, out, err = run_cli(monkeypatch, capsys, "dead-letters", *args,
                                 "--database-url", populated)  # fmt: skip
        assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1
