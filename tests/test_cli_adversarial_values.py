"""Adversarial command-line values found by walking the click command tree: each is a one-line
error and a non-zero exit, and ``snapshots export`` writes both of its files or neither."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli import run_cli

# what Python makes of the byte 0xff in an argument (a Latin-1 terminal's "ÿ"): a surrogate escape
NOT_UTF8 = "\udcff"


def export_snapshot(monkeypatch, capsys, target: str, database_url: str) -> tuple[int, str, str]:
    """``sparsewatch snapshots export news dictionary -o TARGET`` (see :func:`run_cli`)."""
    return run_cli(
        monkeypatch,
        capsys,
        *("snapshots", "export", "news", "dictionary", "-o", target),
        *("--database-url", database_url),
    )


@pytest.fixture
def snapshot_database(database_url: str) -> str:
    """A database holding one stored dictionary snapshot of stream ``news``."""
    import numpy as np
    from sparsewatch.storage.store import Store

    with Store.open(database_url) as store, store.transaction() as tx:
        tx.put_snapshot("news", 0, "dictionary", {"D": np.eye(2)}, {}, 0)
    return database_url


@pytest.mark.parametrize(
    "args",
    [
        ("alerts", "--stream", NOT_UTF8),
        ("documents", "--stream", NOT_UTF8),
        ("topics", "--stream", NOT_UTF8),
        ("status", "--no-kafka", "--stream", NOT_UTF8),
        ("snapshots", "list", "--stream", NOT_UTF8),
        ("snapshots", "list", "--model-kind", NOT_UTF8),
        ("snapshots", "export", NOT_UTF8, "dictionary", "-o", "x.npz"),
        ("snapshots", "export", "news", NOT_UTF8, "-o", "x.npz"),
        ("documents", "--story", NOT_UTF8),
        ("db", "forget-group", NOT_UTF8, "--no-kafka"),
    ],
    ids=lambda args: " ".join(a for a in args if a != NOT_UTF8 and a != "x.npz"),
)
def test_a_name_that_is_not_utf8_is_a_usage_error(
    args, database_url, monkeypatch, capsys, tmp_path
):
    """Such a name was sent to the database, and the driver's UnicodeEncodeError came back as
    "error: UnicodeEncodeError: 'utf-8' codec can't encode ..." (exit 1), naming no option, where
    --grep, --topic and --reason gave a usage error."""
    from sparsewatch.storage.store import Store

    Store.open(database_url).dispose()
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, *args, "--database-url", database_url)
    assert code == 2
    assert err.startswith("error: Invalid value for ") and "is not UTF-8 text" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("argument", ["stream", "model_kind"])
def test_a_missing_snapshot_with_a_line_break_in_its_name_is_a_one_line_error(
    argument, snapshot_database, monkeypatch, capsys, tmp_path
):
    """The names went into the message as typed: "x\\ny" printed the error on two lines."""
    names = {"stream": "news", "model_kind": "dictionary", argument: "x\ny"}
    code, _, err = run_cli(
        monkeypatch,
        capsys,
        "snapshots",
        "export",
        names["stream"],
        names["model_kind"],
        "-o",
        str(tmp_path / "snap.npz"),
        "--database-url",
        snapshot_database,
    )
    assert code == 2
    assert err.count("\n") == 1 and "x\\ny" in err


def test_export_writes_nothing_when_the_metadata_file_cannot_be_written(
    snapshot_database, monkeypatch, capsys, tmp_path
):
    """A folder named like the metadata file: the .npz was written, then the .json failed with an
    error naming the .npz, leaving half an export."""
    out = tmp_path / "out"
    (out / "snap.json").mkdir(parents=True)
    code, _, err = export_snapshot(monkeypatch, capsys, str(out / "snap.npz"), snapshot_database)
    assert code == 2
    assert err.count("\n") == 1 and str(out / "snap.json") in err
    assert sorted(p.name for p in out.iterdir()) == ["snap.json"]
    assert not any((out / "snap.json").iterdir())


def test_export_over_earlier_files_replaces_both(snapshot_database, monkeypatch, capsys, tmp_path):
    """The files are written beside their targets and renamed over them: an earlier export is
    replaced whole, and no temporary file stays."""
    import numpy as np

    out = tmp_path / "out"
    out.mkdir()
    (out / "snap.npz").write_bytes(b"old")
    (out / "snap.json").write_text("old")
    code, printed, _ = export_snapshot(
        monkeypatch, capsys, str(out / "snap.npz"), snapshot_database
    )
    assert code == 0 and printed.startswith("wrote ")
    assert sorted(p.name for p in out.iterdir()) == ["snap.json", "snap.npz"]
    with np.load(out / "snap.npz", allow_pickle=False) as arrays:
        assert np.array_equal(arrays["D"], np.eye(2))
    assert '"model_kind": "dictionary"' in (out / "snap.json").read_text()


def test_export_to_a_fifo_is_refused_without_waiting(
    snapshot_database, monkeypatch, capsys, tmp_path
):
    """Opening a FIFO for writing waits for a reader: the export hung forever."""
    fifo = tmp_path / "snap.npz"
    os.mkfifo(fifo)
    code, _, err = export_snapshot(monkeypatch, capsys, str(fifo), snapshot_database)
    assert code == 2 and "is not a regular file" in err


def test_export_to_an_empty_file_name_is_a_usage_error(snapshot_database, monkeypatch, capsys):
    """``-o ""`` passed click's path check and failed as "error: ValueError: PosixPath('.') has
    an empty name" (exit 1)."""
    code, _, err = export_snapshot(monkeypatch, capsys, "", snapshot_database)
    assert code == 2 and err.startswith("error: Invalid value for '--output'")


def test_a_config_file_nested_too_deeply_is_a_one_line_error(tmp_path: Path) -> None:
    """tomllib parses nesting recursively: 10,000 nested arrays raised a RecursionError, shown as
    ``error: RecursionError: maximum recursion depth exceeded``."""
    from sparsewatch.config import load_config
    from sparsewatch.errors import SparsewatchError

    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 10_000 + "]" * 10_000 + "\n", encoding="utf-8")
    with pytest.raises(SparsewatchError, match=r"is not valid TOML: nested too deeply$"):
        load_config(path, env={})
