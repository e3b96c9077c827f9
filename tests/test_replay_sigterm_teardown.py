"""SIGTERM landing as a replay ends, while its producer is destroyed: the summary says interrupted.

The producer was destroyed as ``replay_documents`` returned (its frame ending), after the block
that absorbs interrupts. Its destruction releases the GIL while librdkafka stops its threads,
then runs the signal handlers that came meanwhile, and leaves their KeyboardInterrupt set without
raising it: ``sparsewatch replay`` failed at the next call (``SystemError: <built-in method
__enter__ of _thread.RLock ...> returned a result with an exception set``), exit 1, no summary
and no resume point, the errors file discarded, although every document was delivered (a user
running the replay again sent them all twice). About 1 run in 200 stopped with SIGTERM near its
end. A SIGTERM landing right after the destruction escaped from the replay as a
KeyboardInterrupt, with no summary either.

Here the signal lands at those precise moments: it is made to arrive (for Python) by a weakref
callback of an object that the teardown itself releases, a chain of C functions that runs no
Python code, so that its handler runs where the handler of a real signal landing there runs.
(``os.kill`` runs the handler at once, inside the callback, whose exception is dropped.)
"""

from __future__ import annotations

import _thread
import functools
import gc
import itertools
import signal
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.replay.documents import ErrorFile
from sparsewatch.replay.producer import ReplaySummary, replay_documents

from sparsewatch.runtime import sigterm_interrupts
from tests.support.kafka_topics import consume_values

T0 = 1_767_225_600_000  # 2026-01-01
N = 20


class _SigtermAtRelease:
    """SIGTERM (for Python: its handler runs at the next check, as for a real signal) the moment
    one of the objects given to :meth:`watch` is released; :attr:`sent` says whether it was."""

    def __init__(self) -> None:
        self.refs: list[weakref.ref[Any]] = []

    def watch(self, obj: object) -> None:
        # A C callable run with the weakref: dict.fromkeys consumes the starmap, which calls
        # interrupt_main(SIGTERM) (a signal's arrival for Python, without running its handler).
        trip = itertools.starmap(_thread.interrupt_main, [(signal.SIGTERM,)])
        self.refs.append(weakref.ref(obj, functools.partial(dict.fromkeys, trip)))

    @property
    def sent(self) -> bool:
        """Whether a watched object was released (its callback run)."""
        return any(ref() is None for ref in self.refs)


def _the_replays_producer(before: list[Producer]) -> Producer:
    """The one producer made since ``before`` was taken (the replay's)."""
    made = [o for o in gc.get_objects() if type(o) is Producer and not any(o is b for b in before)]
    assert len(made) == 1, made
    return made[0]


def _watching(
    at: str, before: list[Producer], sigterm: _SigtermAtRelease
) -> Callable[[ReplaySummary], None]:
    """A ``progress`` callback that, at the first document, has ``sigterm`` watch what is released
    as the replay ends: each object holding its producer (``holder``: the signal then lands in
    the producer's destruction, made right after), or the producer itself (``producer``: its
    logger, released as its destruction ends)."""

    def progress(summary: ReplaySummary) -> None:
        if summary.read != 1:
            return
        producer = _the_replays_producer(before)
        if at == "holder":
            mine = (before, sigterm.refs)
            for holder in gc.get_referrers(producer):
                if not any(holder is m for m in mine) and type(holder).__weakrefoffset__:
                    sigterm.watch(holder)
        else:
            for referent in gc.get_referents(producer):
                if type(referent).__weakrefoffset__:
                    sigterm.watch(referent)
        assert sigterm.refs, f"nothing to watch ({at})"
        del producer

    return progress


@pytest.mark.kafka
@pytest.mark.parametrize("topic", ["existing", "new"])
@pytest.mark.parametrize("at", ["holder", "producer"])
def test_sigterm_while_the_producer_is_destroyed_ends_the_replay_as_interrupted(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, at: str, topic: str
) -> None:
    """Every document delivered, SIGTERM landing as the producer is destroyed (``holder``) or
    right after (``producer``), handled as the command line does (:func:`sigterm_interrupts`):
    the replay returns its summary, interrupted, with the resume point past every document, and
    the errors file (one invalid document) is kept. To a topic that exists (the command line
    creates it first) it stopped with a SystemError, or a KeyboardInterrupt, instead; to a new
    one its producer outlived it (held, with the replay's frame, by the exception of the topic
    limits' lookup) until a garbage collection destroyed it, anywhere."""
    if topic == "existing":
        ensure_topics(kafka_bootstrap, {topic_name: 1})
    docs: list[dict[str, Any]] = [
        {"id": str(i), "text": f"text {i}", "timestamp": T0 + i} for i in range(N)
    ]
    docs.append({"id": "bad", "text": "no timestamp"})
    errors_path = tmp_path / "errors.jsonl"
    before = [o for o in gc.get_objects() if type(o) is Producer]
    sigterm = _SigtermAtRelease()
    outcome: ReplaySummary | BaseException
    try:
        with sigterm_interrupts(), ErrorFile(errors_path) as errors:
            summary = replay_documents(
                docs,
                kafka_bootstrap,
                topic_name,
                errors=errors,
                progress=_watching(at, before, sigterm),
            )
        outcome = summary
    except BaseException as exc:  # asserted below: a KeyboardInterrupt would end the session
        outcome = exc
    del before
    assert isinstance(outcome, ReplaySummary), f"the replay stopped with {outcome!r}"
    assert sigterm.sent, "the teardown released nothing watched"
    assert outcome.interrupted
    assert (outcome.produced, outcome.failed, outcome.rejected) == (N, 0, 1)
    assert outcome.resume_skip == N
    assert len(errors_path.read_text().splitlines()) == 1
    assert sorted(int(v["id"]) for v in consume_values(kafka_bootstrap, topic_name)) == list(
        range(N)
    )
