"""Processed windows the anomaly worker no longer remembers by number, read again after a restore.

A processed window was recognised only by its number among the last ``REMEMBERED_WINDOWS``
processed. A restart re-reads a partition from its stored resume offset, which another stream on
the partition may hold back (consumers/worker.py): a stream that processed more windows than that
since then took its oldest windows read again for new ones and processed each a second time
(rescored by a later model, its stored rows overwritten, fed to the reference set again),
forgetting the next one, so that every window read again was processed twice, and the messages
of a processed window dead-lettered once were dead-lettered again. The stream now remembers, per
partition, the offset up to which every message of it was taken.

And a stream restored from a checkpoint written before the processed windows were remembered
counted every window up to its last one as processed, for ever (re-saved so in every later
checkpoint): once the detector's window numbers went down (its ``windows.size`` grew), every
later window of the stream was ignored silently.
"""

from __future__ import annotations

import numpy as np
import pytest
from sparsewatch.consumers import anomaly_worker
from sparsewatch.consumers.anomaly_worker import REMEMBERED_WINDOWS, AnomalyStreamState
from sparsewatch.consumers.score_messages import parse_scored
from sparsewatch.storage.store import Checkpoint

from sparsewatch.config import load_config
from tests.support.anomaly_worker import restore, scores_message

N = REMEMBERED_WINDOWS + 10  # windows 0-9 are forgotten
REASON = (
    "scores message of window 0 (2 documents) not used: window 0 was processed with its "
    "version of 1 documents"
)


def _config(**env: str):
    return load_config(
        env={
            "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "20",
            "SPARSEWATCH_ANOMALY_REFIT_EVERY_WINDOWS": "1000",
            "SPARSEWATCH_ANOMALY_REFIT_DRIFT_P": "0",
            **env,
        }
    )


def _msg(seq: int, i: int = 0, n: int = 1) -> bytes:
    return scores_message("s", seq, i, n, tag="a")


def _feed(
    state: AnomalyStreamState, sent: list[tuple[int, bytes]], partition: int = 0
) -> tuple[list[int], list[tuple[int, str]]]:
    """Feed ``sent`` (offset, message): the windows processed, and the dead letters."""
    windows, dead = [], []
    for offset, raw in sent:
        for out in state.add(parse_scored(raw), partition, offset, 0.0):
            dead += [(row["offset"], row["reason"]) for row in out.dead]
            if out.is_window:
                windows.append(int(out.summary.split(" window ")[1].split(":")[0]))
    return windows, dead


@pytest.fixture(scope="module")
def first_run():
    """Stream ``s`` on partition 0 (another stream's messages at the odd offsets, left out):
    window 0 of 1 document, a larger version of it (its second document a dead letter), then
    windows 1 to N-1 of 1 document."""
    sent = [(0, _msg(0)), (2, _msg(0, 0, 2)), (4, _msg(0, 1, 2))]
    sent += [(4 + 2 * seq, _msg(seq)) for seq in range(1, N)]
    state = AnomalyStreamState("s", _config(), None)
    assert _feed(state, sent) == (list(range(N)), [(4, REASON)])
    assert len(state.done) == REMEMBERED_WINDOWS and 0 not in state.done
    return sent, state


def test_forgotten_windows_read_again_after_a_restore_are_not_processed_again(first_run):
    sent, state = first_run
    # the partition read again from its start (its resume offset held back by the other stream)
    restored = restore(state, _config())
    assert _feed(restored, sent) == ([], [])  # no window twice, no dead letter twice
    assert np.array_equal(restored.reference, state.reference)
    assert restored.since_fit == state.since_fit and restored.min_buffered_offset(0) is None
    # so after the next restore too, and new messages (at larger offsets) are taken
    again = restore(restored, _config())
    assert _feed(again, sent[:100]) == ([], [])
    after = sent[-1][0]
    assert _feed(again, [(after + 2, _msg(N)), (after + 4, _msg(N + 1))]) == ([N, N + 1], [])


def test_the_forgotten_windows_offset_applies_on_their_partition_only(first_run):
    sent, state = first_run
    assert _feed(restore(state, _config()), sent[:20]) == ([], [])
    # the stream met on another partition after a restart (it moved): its offsets there are
    # another partition's, its windows judged by their numbers
    moved = restore(state, _config())
    new = [(offset, _msg(N + offset)) for offset in range(3)]
    assert _feed(moved, new, partition=1) == ([N, N + 1, N + 2], [])
    # and partition 0 read again later is still recognised
    assert _feed(restore(moved, _config()), sent[:20]) == ([], [])


def test_a_message_still_pending_is_not_counted_as_taken(monkeypatch):
    """A message pending while the windows after it are forgotten (a stray window far ahead,
    one message of it amid each window's) is taken again when read again after a restore: the
    offset kept stays below it. (Fewer windows remembered: a shorter test.)
    """
    monkeypatch.setattr(anomaly_worker, "REMEMBERED_WINDOWS", 40)
    stray, total = 10**6, 52  # windows 0-11 are forgotten
    sent = [(2 * seq + i, _msg(seq, i, 2)) for seq in range(10) for i in range(2)]
    sent.append((20, _msg(stray, 0, 1000)))
    for seq in range(10, total):
        for raw in (_msg(seq, 0, 2), _msg(stray, seq - 9, 1000), _msg(seq, 1, 2)):
            sent.append((len(sent), raw))
    state = AnomalyStreamState("s", _config(), None)
    assert _feed(state, sent) == (list(range(total)), [])
    assert state.min_buffered_offset(0) == 20
    restored = restore(state, _config())
    windows, dead = _feed(restored, sent)
    # those forgotten before it are recognised; those after it by their numbers only, as before
    assert not set(windows) & set(range(10)) and dead == []
    assert restored.min_buffered_offset(0) == 20  # its messages are pending again
    assert restored.taken_to == state.taken_to == {0: 19}


def test_a_checkpoint_from_before_windows_were_remembered_lets_lower_window_numbers_through():
    state = AnomalyStreamState("s", _config(), None)
    hourly = [(k, _msg(473_000 + k)) for k in range(5)]
    assert _feed(state, hourly)[0] == [473_000 + k for k in range(5)]
    arrays, meta = state.checkpoint()
    legacy = {k: v for k, v in arrays.items() if not k.startswith(("done_", "taken_"))}
    old = AnomalyStreamState("s", _config(), Checkpoint("g", "s", legacy, meta, None))
    # its windows read or re-sent again are still ignored
    assert _feed(old, hourly) == ([], [])
    assert _feed(old, [(10, _msg(473_002))]) == ([], [])
    # windows.size grew: daily windows, numbered far lower, are processed
    daily = [(20 + k, _msg(19_700 + k)) for k in range(3)]
    assert _feed(old, daily) == ([19_700, 19_701, 19_702], [])
    again = restore(old, _config())
    assert again.done_floor == -1 and _feed(again, [(30, _msg(19_703))])[0] == [19_703]
    assert _feed(again, [(31, _msg(473_004))]) == ([], [])
    # a checkpoint written since, which carried the floor beside the windows processed after it
    carried = {
        **legacy,
        "done_seqs": np.asarray([473_005], np.int64),
        "done_sizes": np.asarray([1], np.int64),
        "done_floor": np.asarray(473_004, np.int64),
    }
    since = AnomalyStreamState("s", _config(), Checkpoint("g", "s", carried, meta, None))
    assert _feed(since, [(40, _msg(473_005)), (41, _msg(473_003))]) == ([], [])
    assert _feed(since, [(42, _msg(19_700))]) == ([19_700], [])
