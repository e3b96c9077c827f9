"""JSON and CSV output are UTF-8 whatever the locale's encoding (JSON must be, RFC 8259): under a
Latin-1 stdout (``PYTHONIOENCODING``, or a redirected Windows console's cp1252) a document with
"İ" or Greek made ``documents --format json`` fail with ``error: UnicodeEncodeError`` (status 1),
and ``alerts --follow`` likewise."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from sparsewatch.storage.store import Store

from tests.support.text_database import database_holding

T0 = datetime(2024, 3, 1, tzinfo=UTC)
TEXT = "İstanbul: ΟΔΟΣ κλειστή, 東京 \x1b[31m"


@pytest.fixture
def url(tmp_path) -> str:
    return database_holding(tmp_path / "a.db", TEXT, "novel_document")


def latin1_env() -> dict[str, str]:
    return {**os.environ, "PYTHONIOENCODING": "latin-1"}


def sparsewatch(*args: str) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "sparsewatch", *args]
    return subprocess.run(command, capture_output=True, env=latin1_env(), timeout=120)


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (("documents",), "text"),
        (("alerts",), "summary"),
        (("dead-letters",), "reason"),
        (("dead-letters", "--summary"), "example"),
    ],
)
def test_json_and_csv_are_utf8_under_a_latin1_stdout(url, args, key):
    done = sparsewatch(*args, "--format", "json", "--database-url", url)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    assert json.loads(done.stdout.decode("utf-8"))[0][key] == TEXT
    done = sparsewatch(*args, "--format", "csv", "--database-url", url)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    text = done.stdout.decode("utf-8")
    assert next(csv.DictReader(io.StringIO(text, newline="")))[key] == TEXT


def test_status_json_is_utf8_under_a_latin1_stdout(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with Store.open(url) as store, store.transaction() as tx:
        tx.upsert_window("İstanbul", 0, T0, T0 + timedelta(hours=1), 1, None, {}, "idle")
    done = sparsewatch("status", "--no-kafka", "--format", "json", "--database-url", url)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    assert json.loads(done.stdout.decode("utf-8"))["streams"][0]["stream"] == "İstanbul"


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_follow_is_utf8_under_a_latin1_stdout(url, fmt):
    command = [sys.executable, "-m", "sparsewatch", "alerts", "--follow", "--interval", "0.2",
               "--format", fmt, "--database-url", url]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=latin1_env()) as proc:  # fmt: skip
        assert proc.stdout is not None
        header = first = proc.stdout.readline()
        if fmt == "csv":
            first = proc.stdout.readline()  # after the header
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == b"", err
    if fmt == "json":
        assert json.loads(first.decode("utf-8"))["summary"] == TEXT
    else:
        lines = [header.decode("utf-8"), first.decode("utf-8")]
        assert next(csv.DictReader(lines))["summary"] == TEXT
