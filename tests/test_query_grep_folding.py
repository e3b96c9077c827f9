"""``--grep`` folds case the same way on SQLite and PostgreSQL, whatever the database's locale.

The rule: each character is replaced by its Unicode simple lowercase (one code point for one:
``İ`` -> ``i``, ``Σ`` -> ``σ`` wherever it stands, ``ẞ`` -> ``ß``), and the final sigma ``ς`` by
``σ``, on the text and on the piece searched for; no full case folding (``ß`` is not ``ss``).
Before, ``ς`` stayed ``ς``, so "ΣΕΙΣΜΟΣ" (folded "σεισμοσ") never matched "σεισμος". Before, SQLite
lowered with Python's ``str.lower`` (``İ`` -> ``i̇``, two code points; ``Σ`` -> ``ς`` at a word's
end) and PostgreSQL with its database's LC_CTYPE (ASCII only under ``C``), and the piece searched
for was always lowered by Python: ``--grep İstanbul`` did not find "İstanbul" on PostgreSQL.
"""

from __future__ import annotations

import json
import random
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sparsewatch.storage.alert_follower import AlertFollower
from sparsewatch.storage.store import Store
from sparsewatch.storage.text_match import fold_case

from tests.support.cli import run_cli
from tests.support.storage import novel_document_alerts

T0 = datetime(2024, 3, 1, tzinfo=UTC)
TEXTS = {
    "ist": "İstanbul trafiği",
    "ath": "ΟΔΟΣ ΑΘΗΝΑΣ κλειστή",
    "zur": "Straße in ZÜRICH gesperrt",
    "big": "GROẞE Straße",
    "ss": "Grosse Strasse",
    "fin": "δρόμος κλειστός",
}


def populate(url: str) -> str:
    docs = [
        {
            "stream": "s",
            "doc_id": doc_id,
            "event_time": T0 + timedelta(minutes=i),
            "window_seq": 0,
            "novelty_score": 0.5,
            "novel": True,
            "late": False,
            "text": text,
        }
        for i, (doc_id, text) in enumerate(TEXTS.items())
    ]
    dead = [
        {"topic": "t", "partition": 0, "offset": i, "reason": d["text"], "payload": b"x"}
        for i, d in enumerate(docs)
    ]
    with Store.open(url) as store, store.transaction() as tx:
        tx.upsert_window("s", 0, T0, T0 + timedelta(hours=1), len(docs), None, {}, "idle")
        tx.insert_documents(docs)
        tx.insert_alerts(novel_document_alerts(docs))
        tx.insert_dead_letters(dead)
    return url


def found(monkeypatch, capsys, url: str, command: str, text: str) -> set[str]:
    option = "--reason" if command == "dead-letters" else "--grep"
    code, out, err = run_cli(monkeypatch, capsys, command, option, text, "--format", "json",
                             "--database-url", url)  # fmt: skip
    assert code == 0 and err == "", err
    rows = json.loads(out)
    if command == "dead-letters":
        by_text = {v: k for k, v in TEXTS.items()}
        return {by_text[r["reason"]] for r in rows}
    return {r["subject_id" if command == "alerts" else "doc_id"] for r in rows}


EXPECTED = [
    ("İstanbul", {"ist"}),  # the text as stored finds itself (PostgreSQL did not)
    ("istanbul", {"ist"}),  # İ is i (SQLite did not: i + combining dot)
    ("ISTANBUL", {"ist"}),
    ("οδοσ αθηνασ", {"ath"}),  # Σ is σ at a word's end too (SQLite: ς)
    ("ΟΔΟΣ", {"ath"}),  # PostgreSQL did not: the piece was lowered to "οδος"
    ("zürich", {"zur"}),
    ("straße", {"zur", "big"}),  # ẞ is ß
    ("STRAẞE", {"zur", "big"}),
    ("strasse", {"ss"}),  # no full folding: ß is not ss
    ("κλειστός", {"fin"}),
    ("ΚΛΕΙΣΤΌΣ", {"fin"}),  # ς is σ: a word ends with Σ in capitals (nothing was found)
    ("δρόμοσ", {"fin"}),  # ... and with σ in some texts
    ("ΟΔΟς", {"ath"}),
]


@pytest.mark.parametrize("command", ["alerts", "documents", "dead-letters"])
def test_grep_folds_case_alike_on_both_databases(database_url, command, monkeypatch, capsys):
    url = populate(database_url)
    got = {text: found(monkeypatch, capsys, url, command, text) for text, _ in EXPECTED}
    assert got == dict(EXPECTED)


def test_the_alert_tail_folds_alike(database_url):
    url = populate(database_url)
    with Store.open(url) as store, store.reading() as conn:
        follower = AlertFollower(text="istanbul")
        assert {r["subject_id"] for r in follower.start(conn, backlog=10)} == {"ist"}
        assert follower.poll(conn) == []


def test_fold_case_is_the_simple_lowercase_of_each_character_with_final_sigma_as_sigma():
    rng = random.Random(5)
    alphabet = [chr(i) for i in range(1, sys.maxunicode + 1) if not 0xD800 <= i < 0xE000]
    folded = {"\u0130": "i", "\u03c2": "\u03c3"}  # İ, and ς
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(40)) + " ΑΣ Σ ΣΑ İ ς"
        simple = "".join(folded.get(c, c.lower()) for c in text)
        assert fold_case(text) == simple
        assert len(fold_case(text)) == len(text)


def test_postgresql_folds_non_ascii_under_a_c_locale(postgres_database, monkeypatch, capsys):
    """A database created with LC_CTYPE "C" (``initdb --locale=C``, often advised for speed):
    its lower() folds ASCII letters only, so "ZÜRICH" was not found for "zürich"."""
    url, admin_url = postgres_database
    name = f"sw_c_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        create = f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LC_CTYPE 'C'"
        conn.execute(sa.text(f"{create} LC_COLLATE 'C'"))
    try:
        c_url = sa.engine.make_url(url).set(database=name).render_as_string(hide_password=False)
        populate(c_url)
        for text, expected in EXPECTED:
            assert found(monkeypatch, capsys, c_url, "documents", text) == expected, text
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
