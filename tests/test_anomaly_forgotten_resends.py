"""Copies of a processed window read after it was processed, once the window is forgotten.

A processed window no longer among the last ``REMEMBERED_WINDOWS`` is recognised when read
again by the offset up to which the stream's messages were taken on its partition. That offset
rose only to the largest offset of the processed version's messages: the copies of the window
re-sent after it was processed (a restarted detector re-sends the windows after its last
checkpoint), ignored or dead-lettered when read, lay beyond it. A restart re-reading the
partition from a resume offset that another stream held back then found them covered neither by
the window's number nor by the offset, and processed the window a second time (scored by a later
model, its stored rows overwritten, fed to the reference set again).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from sparsewatch.consumers import anomaly_worker
from sparsewatch.consumers.anomaly_worker import AnomalyStreamState
from sparsewatch.consumers.processor import Output
from sparsewatch.consumers.score_messages import parse_scored
from sparsewatch.storage.store import Store
from sqlalchemy import text

from sparsewatch.config import load_config
from tests.support.anomaly_worker import restore, run_anomaly_worker, scores_message, scores_topic
from tests.test_anomaly_evicted_windows import _config, _msg

REMEMBERED = 3  # (the worker's 4,096 in a test would be thousands of windows)
DEAD = (
    "scores message of window 2 (2 documents) not used: window 2 was processed with its version "
    "of 1 documents"
)


# Offset 0 holds another stream's message (left out), which holds the resume offset back; then
# windows 0-2 of 1 document, windows 0 and 1 re-sent, a larger version of window 2 (its second
# document a dead letter), and windows 3-5: windows 0-2 are forgotten, and every window processed
# after their copies is still remembered.
SENT = [_msg(0), _msg(1), _msg(2), _msg(0), _msg(1), _msg(2, 0, 2), _msg(2, 1, 2)]
SENT += [_msg(seq) for seq in range(3, 6)]


def _log(state: AnomalyStreamState, start: int = 0, stop: int = len(SENT)) -> list[tuple]:
    """Feed ``SENT[start:stop]`` (message ``k`` at offset ``k + 1``): what came out, by offset."""
    log = []
    for k in range(start, stop):
        for out in state.add(parse_scored(SENT[k]), 0, k + 1, 0.0):
            log += [("dead", row["offset"], row["reason"]) for row in out.dead]
            if out.is_window:
                log.append(("window", k + 1, out.summary))
    return log


def _same_state(a: AnomalyStreamState, b: AnomalyStreamState) -> None:
    final, expected = a.checkpoint()[0], b.checkpoint()[0]
    assert final.keys() == expected.keys()
    for key in expected:
        assert np.array_equal(final[key], expected[key]), key


@pytest.fixture
def remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(anomaly_worker, "REMEMBERED_WINDOWS", REMEMBERED)


@pytest.mark.usefixtures("remembered")
def test_copies_read_after_a_window_was_processed_are_taken_with_it():
    state = AnomalyStreamState("s", _config(), None)
    log = _log(state)
    assert [entry[1] for entry in log if entry[0] == "window"] == [1, 2, 3, 8, 9, 10]
    assert [entry[1:] for entry in log if entry[0] == "dead"] == [(7, DEAD)]
    assert sorted(state.done) == [3, 4, 5]
    # windows 0-2 were forgotten with their copies (offsets 4-7): every offset up to 7 is taken
    assert state.taken_to == {0: 7}
    # so the partition read again from its start after a restart gives nothing
    restored = restore(state, _config())
    assert _log(restored) == []
    assert restored.done == state.done and np.array_equal(restored.reference, state.reference)


@pytest.mark.usefixtures("remembered")
@pytest.mark.parametrize("at", range(len(SENT) + 1))
def test_a_restart_reading_forgotten_windows_copies_again_goes_on_as_the_uninterrupted_run(at):
    """Restored after ``at`` messages and the partition read again from its start (the other
    stream's message holds its resume offset there): no window is processed twice (a dead
    letter read again while its window is remembered comes out again, the same: the first one
    stored stands), and the stream ends as the uninterrupted run did."""
    uninterrupted = AnomalyStreamState("s", _config(), None)
    first = _log(uninterrupted)
    state = AnomalyStreamState("s", _config(), None)
    before = _log(state, 0, at)
    restored = restore(state, _config())
    after = _log(restored)
    assert not {e for e in before if e[0] == "window"} & {e for e in after if e[0] == "window"}
    assert set(before) | set(after) == set(first) and len(set(first)) == len(first)
    _same_state(restored, uninterrupted)
    # and once more, now that the whole partition was read
    again = restore(restored, _config())
    assert _log(again) == []
    _same_state(again, uninterrupted)


@pytest.mark.usefixtures("remembered")
def test_a_copy_on_another_partition_leaves_the_windows_offset_on_its_own():
    """A stream met on another partition after a restart (it moved) is judged there by its
    window numbers: a copy read there does not move where the window's messages were."""
    state = AnomalyStreamState("s", _config(), None)
    _log(state, 0, 3)
    assert state.done_at[0] == (0, 1)
    assert state.add(parse_scored(_msg(0)), 1, 50, 0.0) == []
    assert state.done_at[0] == (0, 1)
    assert state.add(parse_scored(_msg(0)), 0, 60, 0.0) == []
    assert state.done_at[0] == (0, 60)


# --- the crash/restore fuzz: restarts at random points, each re-reading from a resume offset
# anywhere between the previous one and the stream's own anchor (another stream on the partition
# may hold it back), with the stored dropped windows forgotten up to a stored offset below it.


def _fuzz_config():
    return load_config(
        env={
            "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "12",
            "SPARSEWATCH_ANOMALY_REFIT_EVERY_WINDOWS": "2",
            "SPARSEWATCH_ANOMALY_CONTAMINATION": "0.1",
        }
    )


def _fuzz_message(seq: int, i: int, n: int, tag: str, rng: np.random.Generator) -> bytes:
    return json.dumps(
        {
            "stream": "s",
            "doc_id": f"{seq}-{tag}-{i}",
            "window_seq": seq,
            "index": i,
            "n": n,
            "timestamp": 1_700_000_000_000 + seq,
            "score": float(rng.uniform(0, 1)),
            "reconstruction_error": float(rng.uniform(0, 1)),
            "novel": False,
            "code_index": [0],
            "code_value": [float(rng.uniform(0, 1))],
            "n_terms": int(rng.integers(1, 50)),
        }
    ).encode()


def _fuzz_stream(rng: np.random.Generator) -> list[bytes]:
    """A stream as detectors send it, crashes and strays included."""
    out: list[bytes] = []
    seq = int(rng.integers(0, 5))
    for _ in range(int(rng.integers(10, 40))):
        n = int(rng.integers(1, 6))
        msgs = [_fuzz_message(seq, i, n, "a", rng) for i in range(n)]
        r = rng.random()
        if r < 0.1 and out:  # a crash while flushing: the window re-sent whole
            out += msgs[: int(rng.integers(0, n))] + msgs
        elif r < 0.18:  # a version cut by a crash, then a larger one
            out += [_fuzz_message(seq, i, n + 2, "a", rng) for i in range(min(n, 2))] + msgs
        elif r < 0.25:  # a larger version after the window was processed
            out += msgs + [_fuzz_message(seq, i, n + 2, "a", rng) for i in range(n + 2)]
        elif r < 0.32:  # a stray message of any window
            stray = int(rng.integers(0, seq + 10))
            out += [_fuzz_message(stray, 0, int(rng.integers(1, 4)), "x", rng), *msgs]
        elif r < 0.38:  # a copy of one message
            out += [*msgs, msgs[int(rng.integers(0, n))]]
        elif r < 0.44:  # the latest messages re-sent by a restarted detector
            out += msgs + out[-int(rng.integers(1, min(len(out), 15) + 1)) :] if out else msgs
        elif r < 0.48:  # window numbers going down (windows.size changed)
            out += msgs
            seq = max(seq - int(rng.integers(1, 30)), 0) - 1
        elif r < 0.52:  # interleaved with the next window
            n2 = int(rng.integers(1, 6))
            nxt = [_fuzz_message(seq + 1, i, n2, "a", rng) for i in range(n2)]
            out += [x for pair in zip(msgs, nxt, strict=False) for x in pair]
            out += msgs[len(nxt) :] + nxt[len(msgs) :]
            seq += 1
        else:
            out += msgs
        seq += 1
    return out


def _fuzz_feed(state: AnomalyStreamState, sent: list[bytes], start: int, stop: int) -> list:
    """What came out, keyed by the offset of the message that produced it."""
    log: list[tuple] = []
    for offset in range(start, stop):
        outputs: list[Output] = state.add(parse_scored(sent[offset]), 0, offset, 0.0)
        for k, out in enumerate(outputs):
            log += [(("dead", row["offset"]), row["reason"]) for row in out.dead]
            if out.is_window:
                rows = dict(out.calls).get("upsert_anomaly_scores", ([],))[0]
                scored = tuple((r["doc_id"], r["anomaly_score"], r["anomaly"]) for r in rows)
                log.append((("window", offset, k, out.window), (out.n_documents, scored)))
    return log


@pytest.mark.usefixtures("remembered")
@pytest.mark.parametrize("seed", range(1000, 1012))
def test_restarts_anywhere_go_on_as_the_uninterrupted_run(seed):
    rng = np.random.default_rng(seed)
    sent = _fuzz_stream(rng)
    uninterrupted = AnomalyStreamState("s", _fuzz_config(), None)
    expected = dict(_fuzz_feed(uninterrupted, sent, 0, len(sent)))
    state = AnomalyStreamState("s", _fuzz_config(), None)
    seen: dict = {}
    start = resume = 0
    cuts = sorted({int(x) for x in rng.integers(1, len(sent), int(rng.integers(1, 5)))})
    for cut in [*cuts, len(sent)]:
        for key, value in _fuzz_feed(state, sent, start, cut):
            assert seen.setdefault(key, value) == value, key  # read again: judged as before
        if cut == len(sent):
            break
        buffered = state.min_buffered_offset(0)
        anchor = cut if buffered is None else buffered
        previous, resume = resume, int(rng.integers(resume, anchor + 1))
        state.forget_before(0, int(rng.integers(previous, resume + 1)))
        state = restore(state, _fuzz_config())
        start = resume
    assert seen == expected
    final, done = state.checkpoint()[0], uninterrupted.checkpoint()[0]
    for key in [k for k in done if not k.startswith("dropped")]:  # (forgotten at other times)
        assert np.array_equal(final[key], done[key]), key


@pytest.mark.kafka
@pytest.mark.slow
def test_a_restarted_worker_leaves_the_stored_results_of_forgotten_windows_alone(
    kafka_bootstrap, tmp_path, monkeypatch
):
    """The worker stopped and started again on the same topic, nothing new in it: stream ``t``'s
    incomplete window holds the partition's resume offset at 0, so stream ``s`` is read again
    from its start, its scored windows 4 and 5 re-sent after they were processed and forgotten
    since. The second run stored nothing: the first run's scores and alerts stand, and no
    dead letter is added."""
    monkeypatch.setattr(anomaly_worker, "REMEMBERED_WINDOWS", REMEMBERED)
    stray = scores_message("t", 5, 0, 2, tag="t")
    windows = {seq: [scores_message("s", seq, i, 3, tag="a") for i in range(3)] for seq in range(9)}
    sent = [stray] + [m for seq in range(6) for m in windows[seq]]
    sent += windows[4] + windows[5]  # re-sent by a restarted detector
    sent += [m for seq in range(6, 9) for m in windows[seq]]  # windows 0-5 are forgotten
    env = scores_topic(kafka_bootstrap, tmp_path, "aresent", sent, "30")
    config = load_config(
        env={
            **env,
            "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "12",
            "SPARSEWATCH_ANOMALY_REFIT_EVERY_WINDOWS": "1",
            "SPARSEWATCH_ANOMALY_REFIT_DRIFT_P": "0",
            "SPARSEWATCH_KAFKA_PUBLISH_ALERTS": "false",
        }
    )

    def stored() -> tuple[list, list]:
        with Store.open(config.database_url) as store, store.reading() as conn:
            rows = conn.execute(
                text("select doc_id, anomaly_score, anomaly from documents order by doc_id")
            ).all()
            alerts = conn.execute(text("select subject_id, score from alerts order by 1")).all()
        return [tuple(r) for r in rows], [tuple(a) for a in alerts]

    first = run_anomaly_worker(config, 8.0)
    assert first.offsets == {0: 0}  # (held back by stream t's incomplete window)
    # (window 3 completes the reference set and is scored with it)
    assert first.scored == {f"{seq}-a-{i}" for seq in range(3, 9) for i in range(3)}
    results = stored()
    second = run_anomaly_worker(config, 8.0)
    assert second.offsets == {0: 0} and second.dead == first.dead
    assert stored() == results
