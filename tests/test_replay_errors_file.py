"""The replay's errors file: a failure to write it stops the replay with its summary and resume
point and one error line naming it (it was taken for a failure to read the input, the rest of
that input dropped, and the replay ended with ``error: OSError: ...``: no summary, a temporary
file left behind); a folder at its path is refused before anything is produced; a replay given
``--skip`` keeps the earlier entries it does not go over (it replaced the list of the replay it
resumed, the rejections in the skipped part lost) and lists none twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.replay.documents import ErrorFile, GoneOver, ReadStats, read_documents
from sparsewatch.replay.readers import Rejected

from tests.support.cli import run_cli
from tests.support.kafka_topics import consume_values, topic_exists

T0 = 1_767_225_600_000  # 2026-01-01
FUTURE = "2150-01-01T00:00:00Z"  # beyond windows.max_ahead: rejected by position when sent
DEV_FULL = Path("/dev/full")  # every write fails: ENOSPC
needs_dev_full = pytest.mark.skipif(not DEV_FULL.exists(), reason="no /dev/full")


def _doc(doc_id: str, i: int = 0, timestamp: int | str | None = None) -> str:
    ts = T0 + i if timestamp is None else timestamp
    return json.dumps({"id": doc_id, "text": f"text {doc_id}", "timestamp": ts}) + "\n"


def _entries(path: Path) -> list[tuple[str, int, str]]:
    """The errors file's entries as (source, line, raw)."""
    lines = path.read_text().splitlines()
    return [(e["source"], e["line"], e["raw"]) for e in map(json.loads, lines)]


def _replay(monkeypatch, capsys, topic: str, bootstrap: str, *args: str) -> tuple[int, str, str]:
    return run_cli(
        monkeypatch, capsys, "replay", *args, "--topic", topic, "--bootstrap-servers", bootstrap,
        "--json",
    )  # fmt: skip


# --- a failure to write the errors file ---


@needs_dev_full
def test_a_failing_errors_file_is_no_failure_to_read_the_input(tmp_path):
    """Without ``on_failure`` the failure is raised from the write; with one, it is called once
    and the input read on, every rejection counted as such (none as an unreadable file)."""
    first = tmp_path / "a.jsonl"
    first.write_text("".join(f"not json {i} {'x' * 60}\n" for i in range(300)) + _doc("a"))
    second = tmp_path / "b.jsonl"
    second.write_text(_doc("b", 1))
    yielded: list[str] = []
    with pytest.raises(OSError, match="No space left"):
        for doc in read_documents([first, second], errors=ErrorFile(DEV_FULL)):
            yielded.append(doc["id"])
    assert yielded == []
    failures: list[OSError] = []
    errors, stats = ErrorFile(DEV_FULL, on_failure=failures.append), ReadStats()
    docs = [d["id"] for d in read_documents([first, second], errors=errors, stats=stats)]
    assert docs == ["a", "b"]  # the rest of a.jsonl was dropped, as unreadable
    assert len(failures) == 1 and errors.failure is failures[0]
    assert errors.count == stats.rejected == 300 and stats.read == 302


@pytest.mark.kafka
@needs_dev_full
@pytest.mark.parametrize(("order", "produced"), [("--no-sort", 3), ("--sort", 0)])
def test_an_errors_file_that_cannot_be_written_stops_the_replay_where_it_resumes(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys, order, produced
):
    """--no-sort: the three documents before the bad line are produced; sorted, the bad line is
    read before anything is sent. Resumed with a writable errors file, the replay sends the rest
    and lists the bad line."""
    first = tmp_path / "a.jsonl"
    first.write_text(_doc("d0", 0) + _doc("d1", 1) + _doc("d2", 2) + "{bad\n" + _doc("d3", 3))
    second = tmp_path / "b.jsonl"
    second.write_text(_doc("d4", 4) + _doc("d5", 5))
    sort = [order] if order == "--no-sort" else []
    inputs = [str(first), str(second), *sort, "--partitions", "1"]
    code, out, err = _replay(
        monkeypatch, capsys, topic_name, kafka_bootstrap, *inputs, "--errors", str(DEV_FULL)
    )
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: cannot write the errors file {DEV_FULL}: No space left")
    summary = json.loads(out)
    assert summary["interrupted"] and summary["errors_file"] is None
    assert summary["produced"] == summary["resume_skip"] == produced
    assert [v["id"] for v in consume_values(kafka_bootstrap, topic_name)] == [
        f"d{i}" for i in range(produced)
    ]
    errors = tmp_path / "errors.jsonl"
    skip = ["--skip", str(summary["resume_skip"])]
    code, out, err = _replay(
        monkeypatch, capsys, topic_name, kafka_bootstrap, *inputs, *skip, "--errors", str(errors)
    )
    assert code == 0, err
    assert [v["id"] for v in consume_values(kafka_bootstrap, topic_name)] == [
        f"d{i}" for i in range(6)
    ]
    assert _entries(errors) == [(str(first), 4, "{bad")]


@pytest.mark.kafka
@needs_dev_full
def test_an_errors_file_failing_in_the_final_flush_still_gives_the_summary(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
):
    """The broker refuses every record: the failures come in delivery reports, mostly during
    the final flush, where an exception escaped the replay (no summary, what was queued lost).
    The stop waits as an interrupt there does."""
    ensure_topics(kafka_bootstrap, {topic_name: 1}, **{"message.timestamp.before.max.ms": "0"})
    corpus = tmp_path / "a.jsonl"
    corpus.write_text("".join(_doc(f"d{i}", i) for i in range(3)))
    code, out, err = _replay(
        monkeypatch, capsys, topic_name, kafka_bootstrap, str(corpus), "--errors", str(DEV_FULL)
    )
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: cannot write the errors file {DEV_FULL}: No space left")
    summary = json.loads(out)
    assert summary["interrupted"] and summary["produced"] == 0 and summary["failed"] >= 1
    assert 1 <= summary["resume_skip"] <= 3


@pytest.mark.kafka
def test_a_full_disk_leaves_the_earlier_errors_file_and_no_temporary_file(
    kafka_bootstrap, topic_name, tmp_path
):
    """A regular errors file on a disk that fills up during the replay (a file size limit: each
    write past 2,000 bytes fails): the earlier errors file stays as it was, nothing else is left
    in its folder, and the replay stops after the documents before the entry that failed."""
    folder = tmp_path / "out"
    folder.mkdir()
    errors = folder / "errors.jsonl"
    earlier = '{"source": "old.jsonl", "line": 1, "reason": "r", "raw": ""}\n'
    errors.write_text(earlier)
    corpus = tmp_path / "a.jsonl"
    corpus.write_text("".join(_doc(f"d{i}", i) + f"bad {i} {'x' * 200}\n" for i in range(40)))
    limited = (
        "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000)); "
        "sys.argv = ['sparsewatch', *sys.argv[1:]]; runpy.run_module('sparsewatch', "
        "run_name='__main__')"
    )  # (Python ignores SIGXFSZ: a write past the limit fails with EFBIG)
    env = {k: v for k, v in os.environ.items() if k != "SPARSEWATCH_DEBUG"}
    proc = subprocess.run(
        [sys.executable, "-c", limited, "replay", str(corpus), "--no-sort", "--topic", topic_name,
         "--bootstrap-servers", kafka_bootstrap, "--errors", str(errors), "--json"],
        env={**env, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: cannot write the errors file {errors}: File too large")
    assert proc.stderr.count("\n") == 1
    summary = json.loads(proc.stdout)
    assert summary["interrupted"] and 0 < summary["produced"] == summary["resume_skip"] < 40
    ids = [v["id"] for v in consume_values(kafka_bootstrap, topic_name)]
    assert ids == [f"d{i}" for i in range(summary["produced"])]
    assert errors.read_text() == earlier and list(folder.iterdir()) == [errors]


@pytest.mark.kafka
def test_a_folder_at_the_errors_path_is_refused_before_anything_is_produced(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("SPARSEWATCH_DATA_DIR", str(tmp_path / "data"))
    folder = tmp_path / "data" / "replay-errors.jsonl"  # the default path
    folder.mkdir(parents=True)
    corpus = tmp_path / "a.jsonl"
    corpus.write_text(_doc("d0") + "{bad\n" + _doc("d1", 1))
    code, out, err = _replay(
        monkeypatch, capsys, topic_name, kafka_bootstrap, str(corpus), "--no-sort"
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: cannot write the errors file {folder}: it is a folder")
    assert not topic_exists(kafka_bootstrap, topic_name)
    assert folder.is_dir() and not list(folder.iterdir())


# --- a replay given --skip ---


def _write(path: Path, entries: list[tuple[str, int, str]]) -> None:
    path.write_text(
        "".join(
            json.dumps({"source": s, "line": n, "reason": "r", "raw": raw}) + "\n"
            for s, n, raw in entries
        )
    )


def _listed(path: Path) -> list[tuple[str, int, str] | str]:
    """The errors file's lines: an entry as (source, line, raw), any other line as it is."""
    listed: list[tuple[str, int, str] | str] = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            listed.append(line)
        else:
            listed.append((entry["source"], entry["line"], entry["raw"]))
    return listed


def test_the_earlier_entries_a_replay_did_not_go_over_are_kept_ahead_of_its_own(tmp_path):
    """By position: those outside first..last; by file and line (a file by any path to it):
    those of files not read, or past the line read to; markers (line 0) not listed again; a
    line that is no entry."""
    errors = tmp_path / "errors.jsonl"
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    a_spelt_otherwise = str(tmp_path / "sub" / ".." / "a.jsonl")
    _write(
        errors,
        [("t", 1, "d1"), ("t", 5, "d5"), ("t", 9, "d9"), ("t", 0, "m1"), ("t", 0, "m2"),
         (a, 2, "x"), (a_spelt_otherwise, 3, "y"), (a, 7, "z"), (b, 3, "w"), ("other", 5, "v")],
    )  # fmt: skip
    with errors.open("a") as fh:
        fh.write("not an entry")  # (no newline at the end)
    with ErrorFile(errors) as file:
        file.write(Rejected("t", 5, "again", "d5"))
        file.write(Rejected("t", 0, "again", "m1"))
        file.write(Rejected(a, 2, "again", "x"))
        # positions 4 to 6 gone over; a.jsonl read to its line 4, b.jsonl not at all
        file.keep_earlier(GoneOver("t", 4, 6, ReadStats(read_to={a: 4})))
    assert _listed(errors) == [
        ("t", 1, "d1"), ("t", 9, "d9"), ("t", 0, "m2"), (a, 7, "z"), (b, 3, "w"),
        ("other", 5, "v"), "not an entry", ("t", 5, "d5"), ("t", 0, "m1"), (a, 2, "x"),
    ]  # fmt: skip
    assert (file.kept, file.count) == (7, 3) and list(tmp_path.iterdir()) == [errors]


def test_an_earlier_file_all_gone_over_without_new_entries_is_removed(tmp_path):
    errors = tmp_path / "errors.jsonl"
    a = str(tmp_path / "a.jsonl")
    _write(errors, [("t", 2, "d2"), (a, 1, "x")])
    with ErrorFile(errors) as file:
        file.keep_earlier(GoneOver("t", 1, 3, ReadStats(read_whole={a})))
    assert (file.kept, file.count) == (0, 0) and list(tmp_path.iterdir()) == []


@pytest.mark.kafka
def test_a_resumed_replay_keeps_the_entries_of_the_skipped_part(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
):
    """The first replay stops after three documents (--limit; an interrupted one alike): two
    dated too far ahead (positions 1 and 2) and one produced, the bad line between them read.
    The resumed one keeps the two, lists the bad line once (it reads it again) and sends the
    rest."""
    corpus = tmp_path / "a.jsonl"
    corpus.write_text(
        _doc("f0", timestamp=FUTURE) + _doc("f1", timestamp=FUTURE) + "{bad\n"
        + "".join(_doc(f"d{i}", i) for i in range(5))
    )  # fmt: skip
    errors = tmp_path / "errors.jsonl"
    common = [str(corpus), "--no-sort", "--partitions", "1", "--errors", str(errors)]
    code, out, err = _replay(
        monkeypatch, capsys, topic_name, kafka_bootstrap, *common, "--limit", "3"
    )
    assert code == 0, err
    first = json.loads(out)
    assert (first["produced"], first["rejected"], first["resume_skip"]) == (1, 3, 3)
    listed = [(topic_name, 1, "f0"), (topic_name, 2, "f1"), (str(corpus), 3, "{bad")]
    assert sorted(_entries(errors)) == sorted(listed)
    skip = ["--skip", str(first["resume_skip"])]
    code, out, err = _replay(monkeypatch, capsys, topic_name, kafka_bootstrap, *common, *skip)
    assert code == 0, err
    second = json.loads(out)
    assert (second["skipped"], second["produced"], second["errors_file"]) == (3, 4, str(errors))
    assert _entries(errors) == listed  # the two kept, then the bad line found again
    assert [v["id"] for v in consume_values(kafka_bootstrap, topic_name)] == [
        f"d{i}" for i in range(5)
    ]


@pytest.mark.kafka
@pytest.mark.parametrize("skip", [1, 0])
def test_sending_a_listed_document_again_keeps_the_other_entries(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys, skip
):
    """The README's recovery: ``--skip`` one less than a listed position and ``--limit 1``
    (also ``--skip 0``, given: not the default). The document there is still dated too far
    ahead: listed again, once; the entries after it, and the bad line that this replay does not
    read (it stops reading after its document), stay."""
    docs = [_doc("f0", timestamp=FUTURE), _doc("d0", 0), _doc("f1", timestamp=FUTURE)]
    if skip:
        docs.insert(0, _doc("d-1", -1))
    corpus = tmp_path / "a.jsonl"
    corpus.write_text("".join(docs) + "{bad\n" + _doc("f2", timestamp=FUTURE))
    bad_line = len(docs) + 1
    errors = tmp_path / "errors.jsonl"
    common = [str(corpus), "--no-sort", "--partitions", "1", "--errors", str(errors)]
    code, out, err = _replay(monkeypatch, capsys, topic_name, kafka_bootstrap, *common)
    assert code == 0, err
    f0, f1, f2 = skip + 1, skip + 3, skip + 4
    listed = [(topic_name, f0, "f0"), (topic_name, f1, "f1"), (topic_name, f2, "f2")]
    assert sorted(_entries(errors)) == sorted([*listed, (str(corpus), bad_line, "{bad")])
    again = ["--skip", str(skip), "--limit", "1"]
    code, out, err = _replay(monkeypatch, capsys, topic_name, kafka_bootstrap, *common, *again)
    assert code == 0, err
    assert json.loads(out)["rejected"] == 1
    assert sorted(_entries(errors)) == sorted([*listed, (str(corpus), bad_line, "{bad")])
    assert _entries(errors)[-1] == (topic_name, f0, "f0")  # this replay's own, after the others
