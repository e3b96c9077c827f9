"""A replay in which every record is rejected (nothing could be produced: a file of garbage
lines, a CSV without the needed columns, an empty file, documents the detector would refuse)
ends with its summary and one error line that says so and names the errors file, exit status 2:
it exited 0, and a script replaying corpora took it for a success. A replay that produced a
document keeps status 0; so does one resumed with ``--skip`` past everything it had produced,
which produces nothing, as nothing is left to produce (rejections in its input or not)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics

from tests.support.cli import run_replay
from tests.support.kafka_topics import consume_values

pytestmark = pytest.mark.kafka

T0 = 1_767_225_600_000  # 2026-01-01
FUTURE = "2150-01-01T00:00:00Z"  # beyond windows.max_ahead: rejected when it would be sent


def _doc(doc_id: str, timestamp: int | str) -> str:
    return json.dumps({"id": doc_id, "text": f"text {doc_id}", "timestamp": timestamp}) + "\n"


def _replay(
    monkeypatch, capsys, topic: str, bootstrap: str, corpus: Path, *args: str
) -> tuple[int, str, str, Path]:
    """``sparsewatch replay CORPUS ARGS`` with an errors file beside the corpus: status,
    stdout, stderr and the errors file."""
    errors = corpus.with_name("errors.jsonl")
    code, out, err = run_replay(
        monkeypatch, capsys, topic, bootstrap, str(corpus), "--errors", str(errors), *args
    )
    return code, out, err, errors


def _entries(errors: Path) -> list[dict]:
    return [json.loads(line) for line in errors.read_text().splitlines()]


@pytest.mark.parametrize(
    ("name", "content", "rejected"),
    [
        ("garbage.jsonl", "".join(f"not json {i}\n" for i in range(3)), 3),
        ("columns.csv", "title,when\nfirst,2026-01-01\nsecond,2026-01-02\n", 2),
        ("empty.jsonl", "", 1),
        ("future.jsonl", _doc("a", FUTURE) + _doc("b", FUTURE), 2),  # refused when sent
    ],
)
def test_a_replay_that_rejects_every_record_fails(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys, name, content, rejected
) -> None:
    ensure_topics(kafka_bootstrap, {topic_name: 1})  # (read back below, whatever is produced)
    corpus = tmp_path / name
    corpus.write_text(content)
    code, out, err, errors = _replay(
        monkeypatch, capsys, topic_name, kafka_bootstrap, corpus, "--json"
    )
    assert code == 2, (out, err)
    summary = json.loads(out)  # the summary comes first, as ever
    assert (summary["produced"], summary["rejected"]) == (0, rejected)
    assert summary["errors_file"] == str(errors) and len(_entries(errors)) == rejected
    assert err.splitlines()[-1] == (
        f"error: no document was produced: every record read ({rejected}) was rejected; the "
        f"rejections are listed in {errors}"
    )
    assert consume_values(kafka_bootstrap, topic_name) == []


def test_the_text_summary_then_the_error_line(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    corpus = tmp_path / "one.jsonl"
    corpus.write_text("{not json\n")
    code, out, err, errors = _replay(monkeypatch, capsys, topic_name, kafka_bootstrap, corpus)
    assert code == 2
    assert out.startswith("read 1, produced 0, rejected 1, skipped 0, failed 0 to ")
    assert out.splitlines()[-1] == f"rejected records: {errors}"
    assert err.splitlines() == [
        "error: no document was produced: every record read (1) was rejected; the rejections "
        f"are listed in {errors}"
    ]


def test_one_document_produced_among_rejections_succeeds(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    corpus = tmp_path / "mixed.jsonl"
    corpus.write_text("not json\n" + _doc("ok", T0) + _doc("late", FUTURE))
    code, out, err, errors = _replay(
        monkeypatch, capsys, topic_name, kafka_bootstrap, corpus, "--json"
    )
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["produced"], summary["rejected"]) == (1, 2) and err == ""
    assert len(_entries(errors)) == 2
    assert [v["id"] for v in consume_values(kafka_bootstrap, topic_name)] == ["ok"]


def test_a_resume_past_everything_produced_succeeds(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    """Resumed with ``--skip`` past every document, a replay produces none: not for want of
    documents (its input holds the ones produced before), so status 0, though its garbage line
    is rejected again."""
    corpus = tmp_path / "done.jsonl"
    corpus.write_text(_doc("a", T0) + "not json\n" + _doc("b", T0 + 1))
    code, out, err, _ = _replay(monkeypatch, capsys, topic_name, kafka_bootstrap, corpus, "--json")
    assert code == 0 and json.loads(out)["produced"] == 2, err
    resume = json.loads(out)["resume_skip"]
    code, out, err, errors = _replay(
        monkeypatch, capsys, topic_name, kafka_bootstrap, corpus, "--json", "--skip", str(resume)
    )
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["produced"], summary["skipped"], summary["rejected"]) == (0, 2, 1)
    assert err == "" and len(_entries(errors)) == 1
    assert len(consume_values(kafka_bootstrap, topic_name)) == 2  # none sent twice
