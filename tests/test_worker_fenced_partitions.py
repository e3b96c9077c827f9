"""A worker whose partitions went to another member stores nothing more (revision 0010).

A member whose session expired (a stall, a network partition from the broker but not from the
database) learns of the loss at its next poll, or never while cut off. Before, its transaction in
flight, and those of the windows it computed meanwhile, replaced the new owner's checkpoints and
resume offsets with older ones (last write wins): a restart of the new owner then re-read from
there into models that had already learnt those documents. Now each partition the group assigns
is claimed (``Store.claim_partitions``) before its resume offsets are read, and every transaction
first checks, under lock, that the worker's tokens are still the owners (``check_owners``).

Real SQLite and PostgreSQL, real detector states, and a real broker for the running loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sparsewatch.consumers.worker import PartitionsStillFencedError
from sparsewatch.consumers.writer import Destination, WriteJob, make_writer
from sparsewatch.storage import store as store_module
from sparsewatch.storage.store import PartitionsFencedError, Store, StoreTx
from sqlalchemy import text

from sparsewatch.runner import build_worker
from tests.support.gated_writer import CountingStore, feed, finish, open_counting
from tests.test_worker_deferred_detector_jobs import (
    BATCH,
    _contents,
    _run_to_end,
    _SlowStore,
    databases,  # noqa: F401  (a fixture)
    produced_with_reference,
    reference,  # noqa: F401  (a fixture)
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _group_state(store: Store, group: str, topic: str) -> tuple[dict[int, int], dict[str, str]]:
    """The stored resume offsets and each stream's checkpoint digest."""
    with store.reading() as conn:
        digests = conn.execute(
            text("SELECT stream, digest FROM checkpoints WHERE group_id = :g"), {"g": group}
        ).all()
    return store.partition_offsets(group, topic), {s: d for s, d in digests}


def test_claims_fence_off_the_previous_owner_and_roll_back_its_transaction(databases):  # noqa: F811
    url = databases.fresh()
    store = Store.open(url)
    try:
        mine = store.claim_partitions("g", "t", [0, 1, 2])
        assert sorted(mine) == [0, 1, 2] and len(set(mine.values())) == 3
        with store.transaction() as tx:  # its own tokens: stored
            tx.check_owners("g", "t", mine)
            tx.set_partition_offsets("g", "t", {0: 5, 1: 7})
        assert store.partition_offsets("g", "t") == {0: 5, 1: 7}

        theirs = store.claim_partitions("g", "t", [1])
        assert theirs[1] != mine[1]
        with pytest.raises(PartitionsFencedError) as caught, store.transaction() as tx:
            tx.check_owners("g", "t", mine)
            tx.set_partition_offsets("g", "t", {0: 50, 1: 70})
        assert caught.value.partitions == {1}
        assert "partitions 1 of 't'" in str(caught.value)
        assert store.partition_offsets("g", "t") == {0: 5, 1: 7}  # nothing of it stored

        with store.transaction() as tx:  # the partitions it still owns, and another topic's
            tx.check_owners("g", "t", {0: mine[0], 2: mine[2]})
            tx.check_owners("g", "other", {})
            tx.set_partition_offsets("g", "t", {0: 6})
        assert store.partition_offsets("g", "t") == {0: 6, 1: 7}

        assert store.claim_partitions("owners-only", "t", [0]) and "owners-only" in store.groups()
        store.forget_group("g")  # the group's state deleted: no token is anyone's any more
        with pytest.raises(PartitionsFencedError) as caught, store.transaction() as tx:
            tx.check_owners("g", "t", {0: mine[0]})
        assert caught.value.partitions == {0}
        again = store.claim_partitions("g", "t", [0])
        assert again[0] not in (mine[0], theirs[1])
    finally:
        store.dispose()


def test_a_claim_waits_for_the_previous_owners_transaction_in_progress(databases):  # noqa: F811
    """The previous owner's transaction checked its tokens: the new owner's claim waits for its
    commit, and the resume offsets it then reads are those that transaction stored."""
    url = databases.fresh()
    old, new = Store.open(url), Store.open(url)
    try:
        tokens = old.claim_partitions("g", "t", [0])
        checked, release = threading.Event(), threading.Event()

        def previous_owner() -> None:
            with old.transaction() as tx:
                tx.check_owners("g", "t", tokens)
                checked.set()
                assert release.wait(30)
                tx.set_partition_offsets("g", "t", {0: 42})

        writer = threading.Thread(target=previous_owner)
        writer.start()
        assert checked.wait(30)
        claimed: dict[int, str] = {}
        claimer = threading.Thread(
            target=lambda: claimed.update(new.claim_partitions("g", "t", [0]))
        )
        claimer.start()
        claimer.join(1.0)
        assert claimer.is_alive(), "the claim did not wait for the transaction that checked"
        release.set()
        writer.join(30)
        claimer.join(30)
        assert not writer.is_alive() and not claimer.is_alive()
        assert claimed and new.partition_offsets("g", "t") == {0: 42}
        with pytest.raises(PartitionsFencedError), old.transaction() as tx:
            tx.check_owners("g", "t", tokens)
    finally:
        old.dispose()
        new.dispose()


class _StalledStore(Store):
    """A database whose transactions stop right after checking their owners until ``resume``
    is set (a worker stopped mid-transaction: SIGSTOP, a paused VM)."""

    stalled: threading.Event
    resume: threading.Event

    @contextmanager
    def transaction(self) -> Iterator[StoreTx]:
        with super().transaction() as tx:
            check_owners = tx.check_owners

            def checked_then_stalled(*args: Any) -> None:
                check_owners(*args)
                if not self.resume.is_set():
                    self.stalled.set()
                    assert self.resume.wait(60)

            tx.check_owners = checked_then_stalled  # type: ignore[method-assign]
            yield tx


def test_a_stalled_previous_owner_holds_up_the_claim_only_for_the_idle_timeout(
    kafka_bootstrap: str,
    postgres_database: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
):
    """PostgreSQL: the previous owner's writer stops inside a transaction that checked its
    tokens and holds the owner rows' lock. The new owner's claim waits for it only until the
    server ends that idle session (1 s here, OWNER_LOCK_IDLE_TIMEOUT_S); before, it waited as
    long as the stall (for ever for a stopped process, whose host still answers TCP). The
    stalled writer, resumed, finds its session gone, retries as after any lost connection
    (the server's 25P03 is an InternalError to the driver: the retries stopped on it), and is
    fenced off: nothing of its job stored."""
    monkeypatch.setattr(store_module, "OWNER_LOCK_IDLE_TIMEOUT_S", 1.0)
    url = postgres_database[0]
    old = _StalledStore.open(url)
    old.stalled, old.resume = threading.Event(), threading.Event()
    new = Store.open(url)
    writer = make_writer(
        "thread", old, Destination(kafka_bootstrap, "g", "docs", None, "docs.dlq"), "test"
    )
    try:
        tokens = old.claim_partitions("g", "docs", [0])
        job = writer.submit(WriteJob(offsets={0: 3}, owners=tokens))
        assert old.stalled.wait(30)
        started = time.monotonic()
        claimed = new.claim_partitions("g", "docs", [0])
        waited = time.monotonic() - started
        assert waited < 10, f"the claim waited {waited:.1f} s for the stalled transaction"
        assert claimed[0] != tokens[0]
        old.resume.set()
        with pytest.raises(PartitionsFencedError) as caught:
            job.result()
        assert caught.value.partitions == {0}
        assert new.partition_offsets("g", "docs") == {}
        with new.transaction() as tx:
            tx.check_owners("g", "docs", claimed)
            tx.set_partition_offsets("g", "docs", {0: 9})
        assert new.partition_offsets("g", "docs") == {0: 9}
    finally:
        old.resume.set()
        writer.close()
        old.dispose()
        new.dispose()


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_writer_answers_a_fenced_job_with_the_partitions(
    kafka_bootstrap: str,
    databases,  # noqa: F811
    mode: str,
):
    """The writer (a child process, or a thread) raises the fence as such, naming the
    partitions, to the loop: nothing of the job stored; the next job with current tokens is."""
    url = databases.fresh()
    with Store.open(url) as store:
        mine = store.claim_partitions("g", "docs", [0, 1])
        store.claim_partitions("g", "docs", [1])
        destination = Destination(kafka_bootstrap, "g", "docs", None, "docs.dlq")
        writer = make_writer(mode, store, destination, "test")
        try:
            with pytest.raises(PartitionsFencedError) as caught:
                writer.submit(WriteJob(offsets={0: 3, 1: 4}, owners=mine)).result()
            assert (caught.value.group, caught.value.topic) == ("g", "docs")
            assert caught.value.partitions == {1}
            assert store.partition_offsets("g", "docs") == {}
            writer.submit(WriteJob(offsets={0: 3}, owners={0: mine[0]})).result()
            assert store.partition_offsets("g", "docs") == {0: 3}
            writer.submit(WriteJob(offsets={1: 5}, owners=mine))  # fenced, its answer unread
        finally:
            writer.close()  # (the fence is no error of closing)
        assert store.partition_offsets("g", "docs") == {0: 3}


@pytest.mark.parametrize("after_batches", [1, 3])
def test_a_zombie_transaction_in_flight_does_not_rewind_the_new_owner(
    reference,  # noqa: F811
    after_batches: int,
):
    """Worker A (its transactions held in flight until it waits for them) owns both partitions;
    B is assigned them while A's transaction is in flight, reads the stored offsets and
    checkpoints and completes the input. A's transaction, let through afterwards, stores
    nothing: B's checkpoints and resume offsets stay, and the database is an uninterrupted
    run's. A drops its states and skips the partitions' messages until it learns of the loss."""
    data, databases_, expected = reference
    url = databases_.fresh()
    zombie_store = open_counting(url)
    owner_store: CountingStore | None = None
    partitions = [(data.topic, 0), (data.topic, 1)]
    try:
        zombie = data.loop(zombie_store, gated=True)
        zombie._on_assign(partitions)
        feed(zombie, data.messages[: after_batches * BATCH], batch=BATCH)
        assert zombie._in_flight is not None
        in_flight_offsets = dict(zombie._in_flight.offsets)

        owner_store = open_counting(url)
        owner = data.loop(owner_store, gated=False)
        resume = owner._on_assign(partitions)
        rest = [m for m in data.messages if m.offset() >= resume.get((m.topic(), m.partition()), 0)]
        feed(owner, rest, batch=BATCH)
        finish(owner)
        settled = _group_state(owner_store, data.group, data.topic)
        assert settled[0] != in_flight_offsets

        zombie._settle()  # its transaction, let through now: fenced off
        zombie_store.gate_open = None
        assert _group_state(owner_store, data.group, data.topic) == settled
        assert zombie._fenced == {0, 1} and not zombie._owners
        assert not zombie._states and zombie._consistent
        committed = zombie_store.transactions
        zombie._process(data.messages[after_batches * BATCH :], now=1.0)
        zombie._settle()
        assert zombie._in_flight is None and zombie_store.transactions == committed
        zombie._on_lost(partitions)  # it learns of the loss
        assert not zombie._fenced
        assert zombie._writer is not None
        zombie._writer.close()

        assert _group_state(owner_store, data.group, data.topic) == settled
        assert _contents(owner_store) == expected
    finally:
        zombie_store.dispose()
        if owner_store is not None:
            owner_store.dispose()


def test_a_running_worker_fenced_off_one_partition_rereads_the_other(
    kafka_bootstrap: str,
    databases,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
):
    """The real loop over a backlog of two partitions, transactions slower than windows; while
    it runs, the database's owner of partition 1 changes (as a claim of the group's state
    deleted under it, or of a member expelled meanwhile, leaves it; the group still assigns
    partition 1 to this worker). Its next transaction is fenced off: it stores nothing more of
    partition 1, re-reads partition 0 from the stored offsets and completes it, and, partition
    1 still assigned to it after ``fenced_grace_s``, stops with a one-line error instead of
    skipping its messages for ever (before, it went on, and ended as "drained"). A worker
    started afterwards completes the input: the database of an uninterrupted run."""
    caplog.set_level(logging.ERROR, logger="sparsewatch.consumers.worker")
    data, expected = produced_with_reference(kafka_bootstrap, databases)
    url = databases.fresh()
    store = _SlowStore.open(url)
    assert isinstance(store, _SlowStore)
    other = Store.open(url)
    try:
        worker = build_worker("detector", data.config, store)
        worker.writer_mode = "thread"
        worker.poll_batch = 60
        worker.fenced_grace_s = 30.0
        errors: list[BaseException] = []

        def run() -> None:
            try:
                worker.run(until_idle_s=3.0)
            except BaseException as exc:
                errors.append(exc)

        runner = threading.Thread(target=run)
        runner.start()
        deadline = time.monotonic() + 60
        while store.transactions < 2:
            assert time.monotonic() < deadline and runner.is_alive()
            time.sleep(0.01)
        other.claim_partitions(data.group, data.topic, [1])
        claimed = _group_state(other, data.group, data.topic)
        runner.join(120)
        assert not runner.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], PartitionsStillFencedError), errors
        assert "partitions 1 of" in str(errors[0]) and "for 30 s" in str(errors[0])

        offsets, digests = _group_state(other, data.group, data.topic)
        assert offsets.get(1) == claimed[0].get(1), "partition 1 written after its claim"
        odd = {s: d for s, d in digests.items() if int(s[1:]) % 2}
        assert odd == {s: d for s, d in claimed[1].items() if int(s[1:]) % 2}
        assert any("read again from the stored resume offsets" in r.message for r in caplog.records)

        def even_windows(contents: dict[str, list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
            return [row for row in contents["windows"] if int(row[0][1:]) % 2 == 0]

        assert even_windows(_contents(other)) == even_windows(expected)  # partition 0: whole
    finally:
        store.dispose()
        other.dispose()
    assert _run_to_end(data, url, data.config.kafka.group_id) == expected
