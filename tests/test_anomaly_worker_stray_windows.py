"""The anomaly worker's reassembly when a window can never complete, live and after a restore.

A window still incomplete when a later window, all of whose messages came after it, completes
can never complete (a detector sends a stream's windows in order): it goes to the dead letters.
Only the first later complete window was compared, so a stray message with an earlier window
number amid a window's messages (an outside producer's, or one of a window number not among the
remembered ones) held back every later window of the stream, and its partition's resume offset,
for ever. A dropped window's messages read again after a restore (another stream on the
partition held its resume offset back) were pending again: dead-lettered a second time with
another reason once a later window completed, or, at the stream's end, holding the resume offset
back for ever. And nothing dropped the incomplete window of a stream that sends no later one (a
stray message, as of a misspelt stream): its partition's resume offset stayed there for ever.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from sparsewatch.consumers import anomaly_worker
from sparsewatch.consumers.anomaly_worker import INCOMPLETE_IDLE_S, AnomalyStreamState
from sparsewatch.consumers.processor import Output
from sparsewatch.consumers.score_messages import parse_scored
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from tests.support.anomaly_worker import (
    restore,
    run_anomaly_worker,
    scores_topic,
    window_message,
)


def _config(**env: str):
    return load_config(env={"SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "20", **env})


def _with_stray(stray: bytes) -> list[bytes]:
    """Windows 100-107 of 10 documents, ``stray`` amid window 100's messages."""
    sent = [window_message(seq, i, 10) for seq in range(100, 108) for i in range(10)]
    return [*sent[:5], stray, *sent[5:]]


def _feed(state: AnomalyStreamState, sent: list[bytes], start: int = 0) -> list[Output]:
    return [
        out
        for offset in range(start, len(sent))
        for out in state.add(parse_scored(sent[offset]), 0, offset, 0.0)
    ]


def test_a_stray_message_of_an_earlier_window_amid_a_window_does_not_hold_the_stream_back():
    stray = window_message(0, 0, 5)
    state = AnomalyStreamState("s", _config(), None)
    outputs = _feed(state, _with_stray(stray))
    assert [out.n_documents for out in outputs if out.is_window] == [10] * 8
    assert state.last_seq == 107 and state.min_buffered_offset(0) is None
    dead = [(row["offset"], row["reason"], row["payload"]) for out in outputs for row in out.dead]
    assert dead == [
        (
            5,
            "scores message of window 0 (5 documents) not used: incomplete; window 101, sent "
            "after it, completed",
            stray,
        )
    ]


def test_a_complete_last_window_behind_a_stray_is_processed_when_the_stream_goes_quiet():
    """The stray amid the stream's LAST window: no later window completes to release it, and
    when the stream had been quiet for INCOMPLETE_IDLE_S every pending window was dropped, the
    complete one too (its documents never scored, its dead letters saying "incomplete"). Now
    only the stray is dropped, and the window it held back is processed."""
    stray = window_message(0, 0, 5)
    sent = [window_message(seq, i, 10) for seq in range(100, 104) for i in range(10)]
    sent = [*sent[:35], stray, *sent[35:]]  # amid window 103's messages
    state = AnomalyStreamState("s", _config(), None)
    outputs = _feed(state, sent)
    assert [out.n_documents for out in outputs if out.is_window] == [10] * 3
    assert state.close_idle(INCOMPLETE_IDLE_S - 1, 0.0) == []  # (the stream's last add at 0)
    dead, last = state.close_idle(INCOMPLETE_IDLE_S, 0.0)
    assert [(row["offset"], row["payload"]) for row in dead.dead] == [(35, stray)]
    assert "window 0 (5 documents) not used: incomplete when its stream" in dead.dead[0]["reason"]
    assert last.is_window and last.n_documents == 10 and state.last_seq == 103
    assert state.min_buffered_offset(0) is None and state.close_idle(10**6, 0.0) == []


def test_a_window_interleaved_with_an_incomplete_one_still_waits_for_it():
    """Window 1 interleaved with window 0, which may still complete: nothing is dropped while
    no later window sent after all of window 0's messages has completed."""
    order = [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2)]  # window 0 of 3, window 1 of 3
    state = AnomalyStreamState("s", _config(), None)
    outputs = [
        out
        for offset, (seq, i) in enumerate(order)
        for out in state.add(parse_scored(window_message(seq, i, 3)), 0, offset, 0.0)
    ]
    assert outputs == [] and state.min_buffered_offset(0) == 0
    outputs = state.add(parse_scored(window_message(0, 2, 3)), 0, 5, 0.0)
    assert [(out.n_documents, out.dead) for out in outputs] == [(3, []), (3, [])]


def _dropping_stream() -> list[bytes]:
    """Windows 10-19 of 4-8 documents with windows dropped unprocessed: a stray of window 1000
    sent before window 10 completes, window 13 cut by a crash and never re-sent (its messages all
    before window 14's), a stray of window 2 amid window 16's messages, and window 19 cut at the
    stream's end, its message sent before window 18's."""
    rng = np.random.default_rng(3)
    windows = {seq: int(rng.integers(4, 9)) for seq in range(10, 20)}
    out = [window_message(1000, 0, 3)]
    for seq, n in windows.items():
        msgs = [window_message(seq, i, n) for i in range(n)]
        if seq == 13:
            msgs = msgs[:2]
        elif seq == 16:
            msgs = [*msgs[:2], window_message(2, 7, 9), *msgs[2:]]
        elif seq == 18:
            msgs = [window_message(19, 0, 5), *msgs]
        elif seq == 19:
            msgs = []
        out += msgs
    return out


def _log(outputs: list[Output]) -> list[tuple]:
    return [("dead", row["offset"], row["reason"]) for out in outputs for row in out.dead] + [
        ("window", out.summary) for out in outputs if out.is_window
    ]


@pytest.mark.parametrize("at", [*range(1, 51, 5), 51])  # 51: the whole stream
def test_dropped_windows_read_again_after_a_restore_are_judged_as_before(at):
    """The worker restores a stream's checkpoint and re-reads its partition from the smallest
    replay anchor of the partition's streams: with another stream holding it at 0, every
    message is read again. Those of the dropped windows were dead letters once; read again
    they must neither be dead letters again nor hold the resume offset back."""
    sent = _dropping_stream()
    uninterrupted = AnomalyStreamState("s", _config(), None)
    first = _feed(uninterrupted, sent)
    reasons = [entry[2].split(" not used: ")[1] for entry in _log(first) if entry[0] == "dead"]
    assert sorted(r.split(" ")[0] for r in reasons) == ["incomplete;"] * 3 + ["sent"] * 2
    assert uninterrupted.min_buffered_offset(0) is None
    assert sorted(uninterrupted.dropped) == [2, 13, 19, 1000]

    state = AnomalyStreamState("s", _config(), None)
    before = _feed(state, sent[:at])
    restored = restore(state, _config())
    after = _feed(restored, sent)  # re-read from the partition's start
    assert restored.min_buffered_offset(0) is None
    seen = _log(before)
    assert sorted(seen + [entry for entry in _log(after) if entry not in seen]) == sorted(
        _log(first)
    )
    assert not set(_log(before)) & set(_log(after))  # no dead letter, no window twice
    final, done = restored.checkpoint()[0], uninterrupted.checkpoint()[0]
    assert final.keys() == done.keys()
    for key in done:
        assert np.array_equal(final[key], done[key]), key


def test_dropped_windows_are_forgotten_once_the_resume_offset_passes_them():
    sent = _dropping_stream()
    state = AnomalyStreamState("s", _config(), None)
    _feed(state, sent)
    last = {seq: offset for seq, (_, offset) in state.dropped.items()}
    state.forget_before(0, last[13] + 1)
    assert sorted(state.dropped) == [2, 19]  # window 1000's stray and window 13: read no more
    assert sorted(restore(state, _config()).dropped) == [2, 19]
    # a stream read from another partition after a restart judges its messages afresh
    moved = restore(state, _config())
    assert moved.add(parse_scored(window_message(19, 0, 5)), 1, 0, 0.0) == []
    assert moved.min_buffered_offset(1) == 0
    moved.forget_before(1, 0)
    assert moved.dropped == {}


def _stray_of(stream: str) -> bytes:
    """A message of window 5 of ``stream`` claiming 2 documents: its window never completes."""
    return json.dumps({**json.loads(window_message(5, 0, 2)), "stream": stream}).encode()


def test_the_incomplete_window_of_a_quiet_stream_is_dropped():
    stray = _stray_of("s")
    state = AnomalyStreamState("s", _config(), None)
    assert state.add(parse_scored(stray), 0, 7, now=100.0) == []
    assert state.close_idle(100.0 + INCOMPLETE_IDLE_S - 1, 0.0) == []  # its rest may still come
    assert state.min_buffered_offset(0) == 7
    (out,) = state.close_idle(100.0 + INCOMPLETE_IDLE_S, 0.0)
    assert not out.is_window
    assert [(row["offset"], row["reason"], row["payload"]) for row in out.dead] == [
        (
            7,
            "scores message of window 5 (2 documents) not used: incomplete when its stream had "
            "been quiet for 600 s",
            stray,
        )
    ]
    assert state.min_buffered_offset(0) is None and state.close_idle(10**6, 0.0) == []
    # read again after a restore: its dead letter is stored; the window sent again whole is used
    restored = restore(state, _config())
    assert restored.add(parse_scored(stray), 0, 7, now=0.0) == []
    resent = [
        restored.add(parse_scored(window_message(5, i, 2)), 0, 20 + i, now=0.0) for i in range(2)
    ]
    assert [[out.n_documents for out in outs] for outs in resent] == [[], [2]]
    assert restored.min_buffered_offset(0) is None


def test_a_stream_quiet_for_less_than_its_idle_timeout_keeps_its_incomplete_window():
    config = _config(SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S=str(2 * INCOMPLETE_IDLE_S))
    state = AnomalyStreamState("s", config, None)
    state.add(parse_scored(_stray_of("s")), 0, 0, now=0.0)
    assert state.close_idle(2 * INCOMPLETE_IDLE_S - 1, 0.0) == []
    assert len(state.close_idle(2 * INCOMPLETE_IDLE_S, 0.0)[0].dead) == 1


@pytest.mark.kafka
@pytest.mark.slow
def test_a_stray_message_of_a_stream_that_sends_nothing_more_does_not_pin_the_resume_offset(
    kafka_bootstrap, tmp_path, monkeypatch
):
    """One stray scores message of a misspelt stream held the stored resume offset of its
    partition at its offset for ever: every restart read everything after it again."""
    monkeypatch.setattr(anomaly_worker, "INCOMPLETE_IDLE_S", 3.0)  # (10 minutes in a test)
    stray = _stray_of("typo")
    sent = [stray] + [window_message(seq, i, 10) for seq in range(100, 104) for i in range(10)]
    config = _config(**scores_topic(kafka_bootstrap, tmp_path, "aquiet", sent, "1"))
    run = run_anomaly_worker(config, 10.0)
    with Store.open(config.database_url) as store:
        checkpoint = store.load_checkpoint(f"{config.kafka.group_id}.anomaly", "typo")
    assert run.offsets == {0: len(sent)}
    assert [(offset, reason) for offset, reason, _ in run.dead] == [
        (
            0,
            "scores message of window 5 (2 documents) not used: incomplete when its stream had "
            "been quiet for 3 s",
        )
    ]
    assert checkpoint is not None and checkpoint.state["dropped_seqs"].tolist() == [5]


@pytest.mark.kafka
@pytest.mark.slow
def test_a_stray_amid_a_window_neither_stops_the_stream_nor_holds_its_partition_back(
    kafka_bootstrap, tmp_path
):
    stray = window_message(0, 0, 5)
    sent = _with_stray(stray)
    run = run_anomaly_worker(
        _config(**scores_topic(kafka_bootstrap, tmp_path, "astray", sent, "4")), 6.0
    )
    # the reference period (windows 100 and 101) is scored with window 101, then every window
    assert run.scored == {f"{seq}-{i}" for seq in range(101, 108) for i in range(10)}
    assert run.offsets == {0: len(sent)}
    assert [(offset, payload) for offset, _, payload in run.dead] == [(5, stray)]


def test_windows_dropped_together_keep_their_order_and_reasons():
    """Strays behind the window that completes are dropped by window number, the versions it
    supersedes next, then the windows sent entirely before it in the order they arrived (not by
    number); a window with a message on each side of its first waits for the next one. (The
    dead letters as the reassembly gave them before it kept the pending windows' offsets.)"""
    sent = [
        window_message(90, 0, 2),  # 0: strays far ahead ...
        window_message(95, 0, 3),  # 1: ... one with a message after window 10's first
        window_message(7, 0, 3),  # 2: a stray behind
        window_message(70, 0, 2),  # 3
        window_message(6, 1, 4),  # 4: a stray behind
        window_message(80, 0, 3),  # 5
        window_message(10, 0, 3),  # 6: window 10 cut at 3 documents ...
        window_message(10, 0, 2),  # 7: ... and recomputed with 2
        window_message(95, 1, 3),  # 8
        window_message(10, 1, 2),  # 9: window 10 complete
        window_message(11, 0, 2),
        window_message(11, 1, 2),
    ]
    state = AnomalyStreamState("s", _config(), None)
    outputs = _feed(state, sent)
    assert [out.window for out in outputs if out.is_window] == [("s", 10), ("s", 11)]
    head = "scores message of window"
    assert [(row["offset"], row["reason"]) for out in outputs for row in out.dead] == [
        (4, f"{head} 6 (4 documents) not used: incomplete; window 10, sent after it, completed"),
        (2, f"{head} 7 (3 documents) not used: incomplete; window 10, sent after it, completed"),
        (6, f"{head} 10 (3 documents) not used: superseded by its complete version of 2 documents"),
        (0, f"{head} 90 (2 documents) not used: sent before window 10, which completed"),
        (3, f"{head} 70 (2 documents) not used: sent before window 10, which completed"),
        (5, f"{head} 80 (3 documents) not used: sent before window 10, which completed"),
        (1, f"{head} 95 (3 documents) not used: sent before window 11, which completed"),
        (8, f"{head} 95 (3 documents) not used: sent before window 11, which completed"),
    ]
    assert state.min_buffered_offset(0) is None


def _strays_then_a_window(n: int) -> list[bytes]:
    """``n`` stray messages, each of its own window (1 of 2 documents), then a later window."""
    return [window_message(seq, 0, 2) for seq in range(n)] + [window_message(n + 5, 0, 1)]


def test_each_stray_window_is_looked_at_a_bounded_number_of_times(monkeypatch):
    """Each window dropped scanned every pending window (and all their messages for their
    offsets): 2,000 strays dropped when a later window completed took 0.9 s, 16,000 took 96 s.
    Counted, not timed: which versions of a pending window are complete is asked about each
    window a bounded number of times, not once per window dropped before it."""
    asked = 0
    complete_size = AnomalyStreamState._complete_size

    def counted(self: AnomalyStreamState, seq: int) -> int | None:
        nonlocal asked
        asked += 1
        return complete_size(self, seq)

    monkeypatch.setattr(AnomalyStreamState, "_complete_size", counted)
    n = 2000
    state = AnomalyStreamState("s", _config(), None)
    outputs = _feed(state, _strays_then_a_window(n))
    assert [row["offset"] for out in outputs for row in out.dead] == list(range(n))
    assert asked <= 2 * (n + 1)


def test_twenty_thousand_stray_windows_are_dropped_when_a_later_window_completes():
    n = 20_000
    state = AnomalyStreamState("s", _config(), None)
    outputs = _feed(state, _strays_then_a_window(n))
    dead = [row for out in outputs for row in out.dead]
    assert [row["offset"] for row in dead] == list(range(n))
    assert dead[-1]["reason"] == (
        f"scores message of window {n - 1} (2 documents) not used: incomplete; window {n + 5}, "
        "sent after it, completed"
    )
    assert [out.window for out in outputs if out.is_window] == [("s", n + 5)]
    assert state.min_buffered_offset(0) is None
