"""Replay interrupts and corpus edges: the resume point of a replay interrupted before it passed its
``--skip`` part, an interrupt during the final flush (the broker not acknowledging), an
end-of-stream marker the producer refuses, the synthetic generator's topic keywords, the open
files of the event-time sort, and an upper-case ``.GZ`` suffix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sparsewatch.replay.documents import ErrorFile
from sparsewatch.replay.producer import ReplaySummary, replay_documents
from sparsewatch.replay.readers import detect_format
from sparsewatch.replay.synthetic import _pseudo_words, generate_stream

from tests.support.kafka_topics import consume_values, topic_exists

T0 = 1_767_225_600_000  # 2026-01-01


def _docs(n: int) -> list[dict]:
    return [{"id": str(i), "text": f"text {i}", "timestamp": T0 + i} for i in range(n)]


def _interrupted_after(docs: list[dict], n: int) -> Iterator[dict]:
    """``docs``, with SIGINT sent to this process once ``n`` of them were read (Ctrl-C while the
    replay still reads and sorts its input)."""
    for position, doc in enumerate(docs):
        if position == n:
            os.kill(os.getpid(), signal.SIGINT)
        yield doc


@pytest.mark.kafka
@pytest.mark.parametrize("sort", [True, False])
def test_an_interrupt_before_the_skip_part_is_passed_resumes_after_it(
    kafka_bootstrap: str, topic_name: str, sort: bool
) -> None:
    """``--skip 30`` (the first 30 were sent by an earlier run), interrupted while the input was
    still read: the resume point was the documents read so far (0 while sorting), and the same
    command with that ``--skip`` sent the first 30 documents a second time."""
    docs = _docs(50)
    summary = replay_documents(
        _interrupted_after(docs, 10), kafka_bootstrap, topic_name, skip=30, sort=sort
    )
    assert summary.interrupted and summary.produced == 0
    assert summary.resume_skip == 30
    if topic_exists(kafka_bootstrap, topic_name):
        assert consume_values(kafka_bootstrap, topic_name) == []


@pytest.mark.kafka
def test_skip_beyond_the_corpus_or_with_limit_zero_keeps_the_skip_as_resume_point(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """The resume point never goes back before the documents the command was told to skip."""
    assert replay_documents(_docs(5), kafka_bootstrap, topic_name, skip=8).resume_skip == 8
    assert replay_documents(_docs(5), kafka_bootstrap, topic_name, skip=3, limit=0).resume_skip == 3
    assert replay_documents(_docs(5), kafka_bootstrap, topic_name, skip=3).resume_skip == 5


@pytest.mark.kafka
def test_an_interrupt_during_the_final_flush_ends_it_with_a_summary(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Every document handed over, the broker not acknowledging them (here: a topic it does not
    have, not created): Ctrl-C while the replay waited for its final flush escaped from inside
    the flush (a KeyboardInterrupt, or a SystemError after the whole flush timeout when the
    producer logs through Python): no summary, no resume point, and the errors file with the
    undelivered messages was dropped. Now the wait stops, what is still queued is reported as
    not delivered, and the summary says interrupted."""
    topic = f"missing-{uuid.uuid4().hex}"
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))

    def interrupt_after_the_last(summary: ReplaySummary) -> None:
        if summary.read == 5:
            timer.start()

    started = time.monotonic()
    try:
        with ErrorFile(tmp_path / "errors.jsonl") as errors:
            summary = replay_documents(
                _docs(5),
                kafka_bootstrap,
                topic,
                errors=errors,
                progress=interrupt_after_the_last,
                flush_timeout_s=60.0,
                **{"allow.auto.create.topics": False},
            )
    finally:
        timer.cancel()
    assert time.monotonic() - started < 20  # the broker would fail them after 30 s
    assert summary.interrupted and summary.resume_skip == 5
    assert (summary.produced, summary.failed) == (0, 5)
    lines = (tmp_path / "errors.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all("not delivered" in line for line in lines)
    assert not topic_exists(kafka_bootstrap, topic)


# One topic of 4 keywords, 3 of them from the shared pool; all of a document's words are topic
# words. Small vocabularies: 5 background, 1 category, 20 shared, 1 of the topic's own.
_SMALL = {
    "n_topics": 1,
    "n_initial_topics": 1,
    "n_categories": 1,
    "n_background_words": 5,
    "n_category_words": 1,
    "n_topic_words": 4,
    "n_shared_keywords": 20,
    "topic_share": 1.0,
    "category_share": 0.0,
    "kind": "news",
}


@pytest.mark.parametrize("seed", range(10))
def test_synthetic_topic_keywords_are_words_of_the_vocabulary(seed: int) -> None:
    """A topic's keywords lived in an array as wide as its own words: a shared keyword longer
    than all of them was cut short (``cujotaj`` from ``cujotajuz``), a word of no vocabulary."""
    vocabulary = set(_pseudo_words(np.random.default_rng(seed), 5 + 1 + 20 + 1))
    docs = generate_stream(30, seed=seed, shared_keyword_frac=0.75, **_SMALL)
    assert {word for doc in docs for word in doc["text"].split()} <= vocabulary


def test_synthetic_topics_made_of_shared_keywords_only() -> None:
    """``shared_keyword_frac=1`` (every keyword from the shared pool, none of a topic's own)
    stopped with "could not convert string to float"."""
    vocabulary = set(_pseudo_words(np.random.default_rng(0), 5 + 1 + 20))
    docs = generate_stream(30, seed=0, shared_keyword_frac=1.0, **_SMALL)
    assert len(docs) == 30
    assert {word for doc in docs for word in doc["text"].split()} <= vocabulary


@pytest.mark.kafka
def test_an_end_of_stream_marker_the_producer_refuses_is_listed_and_counted(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """A marker the producer refused (here: over a small ``message.max.bytes``; its stream's
    documents are in the skip part) vanished: not counted, not in the errors file, the replay
    reported success. A refused document was listed; the marker now is too, as not delivered."""
    stream = "😀" * 128  # 512 bytes, in the key and in the value
    docs = [{"id": "a", "text": "t", "timestamp": T0, "stream": stream}]
    with ErrorFile(tmp_path / "errors.jsonl") as errors:
        summary = replay_documents(
            docs,
            kafka_bootstrap,
            topic_name,
            skip=1,
            end_of_stream=True,
            errors=errors,
            **{"message.max.bytes": 1000},
        )
    assert (summary.end_markers, summary.failed) == (0, 1)
    (line,) = (tmp_path / "errors.jsonl").read_text().splitlines()
    assert '"line": 0' in line and "end-of-stream marker" in line and "end_of_stream" in line


def test_sorting_many_runs_keeps_few_files_open(tmp_path: Path) -> None:
    """Every sorted run was open at once while they were merged: ``--chunk-size 1000`` over
    300,000 documents stopped with "Too many open files" where a process may open 256 (macOS)
    or 1,024 (a common Linux default). Here: 600 runs of one document under a limit of 100."""
    script = f"""
import random, resource
from pathlib import Path
from sparsewatch.replay.event_sort import sort_by_event_time
resource.setrlimit(resource.RLIMIT_NOFILE, (100, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
times = random.Random(0).choices(range(50), k=600)
docs = [{{"id": str(i), "timestamp": t}} for i, t in enumerate(times)]
got = list(sort_by_event_time(docs, chunk_size=1, tmp_dir=Path({str(tmp_path)!r})))
assert got == sorted(docs, key=lambda d: d["timestamp"]), "order"
print(len(got))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["600"]
    assert not list(tmp_path.iterdir())  # the runs are gone


@pytest.mark.parametrize(
    ("name", "fmt"), [("A.JSONL.GZ", "jsonl"), ("a.csv.Gz", "csv"), ("REUT2-000.SGM.GZ", "reuters")]
)
def test_an_upper_case_gz_suffix_tells_the_format(name: str, fmt: str) -> None:
    """The format's suffix was read in any case (``.SGM``), the ``.gz`` after it only in lower
    case: ``CORPUS.JSONL.GZ`` was refused ("cannot tell the format from '.gz'")."""
    assert detect_format(Path(name)) == fmt
