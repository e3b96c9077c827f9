"""A stream's anomaly state restored anywhere, as the worker loop restores it, goes on exactly
as an uninterrupted one: the same windows scored with the same scores and flags, the same
refits (scheduled and by the drift test) at the same windows, the same dead letters.

The loop's protocol (consumers/worker.py): a checkpoint is taken with the resume offset of the
stream, its first buffered message (a window whose messages are split across polls, or pending
while a later one interleaves) or else the next offset; a restore replays from there.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sparsewatch.consumers.anomaly_worker import AnomalyStreamState
from sparsewatch.consumers.score_messages import parse_scored

from sparsewatch.config import load_config
from tests.support.anomaly_worker import restore, scores_payload


def _config():
    return load_config(
        env={
            "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "60",
            "SPARSEWATCH_ANOMALY_REFIT_EVERY_WINDOWS": "5",
            "SPARSEWATCH_ANOMALY_CONTAMINATION": "0.1",
        }
    )


def _message(seq: int, i: int, n: int, tag: str, rng: np.random.Generator) -> bytes:
    odd = rng.random() < 0.05
    shift = 0.3 if seq >= 14 else 0.0  # drift: refits by the drift test
    atoms = 12 if odd else int(rng.integers(1, 5))
    return scores_payload(
        stream="s",
        doc_id=f"{seq}-{tag}-{i}",
        seq=seq,
        i=i,
        n=n,
        timestamp=1_700_000_000_000 + 60_000 * seq + i,
        score=0.05 if odd else float(np.clip(rng.normal(0.6 + shift, 0.1), 0, 1)),
        error=float(np.clip(rng.normal(0.5, 0.1), 0, 1)),
        code_value=[float(v) for v in rng.uniform(0.05, 0.5, atoms)],
        n_terms=int(rng.integers(5, 40)),
    )


def _sent() -> list[bytes]:
    """The stream's messages as detectors sent them: re-sends after a crash mid-flush, a cut
    version superseded by a larger one, a larger version of a processed window, a window that
    never completes, and two windows interleaved (a detector that lost its partition)."""
    rng = np.random.default_rng(7)
    windows = {}
    for seq in range(30):
        n = int(rng.integers(6, 25))
        windows[seq] = [_message(seq, i, n, "a", rng) for i in range(n)]
    out: list[bytes] = []
    for seq, msgs in windows.items():
        if seq == 9:
            n = len(msgs)  # closed later by a restarted detector: 2 more documents
            out += msgs + [_message(seq, i, n + 2, "a", rng) for i in range(n - 1, n + 2)]
        elif seq == 17:
            out += msgs[:3]  # never completes: dropped once window 18 completes
        elif seq == 21:
            nxt = windows[22]
            out += [m for pair in zip(msgs, nxt, strict=False) for m in pair]
            out += msgs[len(nxt) :] + nxt[len(msgs) :]
        elif seq == 22:
            continue
        elif seq % 6 == 2:
            out += msgs[: len(msgs) // 2] + windows[seq - 1] + msgs
        elif seq % 8 == 5:
            out += [_message(seq, i, len(msgs) - 2, "cut", rng) for i in range(3)] + msgs
        else:
            out += msgs
    return out


def _run(state: AnomalyStreamState, sent: list[bytes], start: int, stop: int, log: list) -> None:
    """Feed ``sent[start:stop]``; log each dead letter and each window scored (with the drift
    test's counts after it: a refit zeroes them)."""
    for offset in range(start, stop):
        outputs = state.add(parse_scored(sent[offset]), 0, offset, 0.0)
        last = max((k for k, out in enumerate(outputs) if out.is_window), default=None)
        for k, out in enumerate(outputs):
            log += [(("dead", row["offset"]), row["reason"]) for row in out.dead]
            if out.is_window:
                rows = dict(out.calls).get("upsert_anomaly_scores", ([],))[0]
                seq = int(out.summary.split(" window ")[1].split(":")[0])
                scored = tuple((r["doc_id"], r["anomaly_score"], r["anomaly"]) for r in rows)
                counts = None  # (the state's counts are those after the last window of the call)
                if k == last:
                    counts = (state.since_fit, state.scored_since_fit, state.flagged_since_fit)
                log.append((("window", seq), (out.n_documents, scored, counts)))


@pytest.fixture(scope="module")
def uninterrupted():
    sent = _sent()
    state = AnomalyStreamState("s", _config(), None)
    log: list = []
    _run(state, sent, 0, len(sent), log)
    return sent, log, state.checkpoint()[0]


def test_the_uninterrupted_run_covers_the_cases(uninterrupted):
    _, log, _ = uninterrupted
    assert len(dict(log)) == len(log)  # nothing twice
    windows = [v for k, v in log if k[0] == "window"]
    assert len(windows) == 29  # window 17 never completed
    assert sum(v[1] != () for v in windows) >= 20  # scored after the reference period
    refits = [i for i, v in enumerate(windows) if v[1] and v[2] and v[2][0] == 0]
    assert len(refits) >= 4 and any(b - a < 5 for a, b in itertools.pairwise(refits))
    reasons = {v.split(" not used: ")[1].split(" ")[0] for k, v in log if k[0] == "dead"}
    assert reasons == {"superseded", "incomplete;", "window"}


@pytest.mark.parametrize("at", list(range(0, 560, 17)))
def test_a_restore_anywhere_goes_on_as_the_uninterrupted_run(uninterrupted, at):
    sent, log, final = uninterrupted
    state = AnomalyStreamState("s", _config(), None)
    before: list = []
    _run(state, sent, 0, at, before)
    resume = state.min_buffered_offset(0)
    resume = at if resume is None else resume
    restored = restore(state, _config())
    after: list = []
    _run(restored, sent, resume, len(sent), after)
    # what the replay produced again is what it produced before; together, the uninterrupted run
    merged = dict(before)
    for key, value in after:
        assert merged.setdefault(key, value) == value, key
    assert merged == dict(log)
    st = restored.checkpoint()[0]
    assert st.keys() == final.keys()
    for key in final:
        assert np.array_equal(st[key], final[key]), key
