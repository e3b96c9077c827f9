"""A store that counts its transactions and a thread writer whose transactions wait until the
worker loop waits for them (deferred commits)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sparsewatch.consumers.writer import Destination, Pending, ThreadWriter, WriteJob
from sparsewatch.storage.store import Store, StoreTx

WAIT_S = 60.0


class _CrashError(Exception):
    """The worker dies with this transaction in flight: nothing of it is committed."""


class CountingStore(Store):
    """The real store, counting its committed transactions. Gated (``gate_open`` set), each
    transaction waits until the loop waits for it (:class:`_GateOpenedOnWait`); ``crash_next``
    makes the next one fail before writing anything."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(engine)
        self.transactions = 0
        self.gate_open: threading.Event | None = None
        self.crash_next = False

    @contextmanager
    def transaction(self) -> Iterator[StoreTx]:
        if self.gate_open is not None:
            assert self.gate_open.wait(WAIT_S), "the loop never waited for this transaction"
            self.gate_open.clear()
        if self.crash_next:
            self.crash_next = False
            raise _CrashError
        with super().transaction() as tx:
            yield tx
        self.transactions += 1


class _GateOpenedOnWait:
    """A job's :class:`Pending` whose transaction is let through when the loop waits for it."""

    def __init__(self, pending: Pending, gate_open: threading.Event) -> None:
        self._pending = pending
        self._gate_open = gate_open

    def ready(self) -> bool:
        return self._pending.ready()

    def result(self) -> float:
        self._gate_open.set()
        return self._pending.result()


class GatedWriter(ThreadWriter):
    """The thread writer over a gated :class:`CountingStore`."""

    def __init__(self, store: CountingStore, destination: Destination, name: str) -> None:
        super().__init__(store, destination, name)
        store.gate_open = threading.Event()
        self._gate_open = store.gate_open

    def submit(self, job: WriteJob) -> Pending:
        return _GateOpenedOnWait(super().submit(job), self._gate_open)
