"""A SQLite database in a folder this user may not write: SQLite keeps a WAL database's -wal and
-shm files beside it and creates them even to read, so every command, queries included, failed
with SQLite's bare "attempt to write a readonly database". The error now says why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sparsewatch.storage.store import Store


def _unprivileged(argv: list[str]) -> list[str]:
    """``argv`` run without the capabilities that let root ignore file permissions."""
    if os.geteuid() != 0:
        return argv
    capsh = shutil.which("capsh")
    if capsh is None:
        pytest.skip("running as root without capsh: file permissions cannot be tested")
    drop = "cap_dac_override,cap_dac_read_search,cap_fowner"
    return [capsh, f"--drop={drop}", "--", "-c", 'exec "$0" "$@"', *argv]


def test_a_database_in_a_read_only_folder_is_a_clear_one_line_error(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    path = folder / "r.db"
    url = f"sqlite:///{path}"
    Store.open(url).dispose()
    folder.chmod(0o555)
    try:
        result = subprocess.run(
            _unprivileged([sys.executable, "-m", "sparsewatch", "alerts", "--database-url", url]),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        folder.chmod(0o755)
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert "attempt to write a readonly database" in result.stderr
    assert f"{path} is in WAL mode" in result.stderr
    assert "its folder and files must be writable" in result.stderr
    with Store.open(url) as store:  # writable again: it opens as before
        assert store.alerts() == []
