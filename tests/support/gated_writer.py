"""A store that counts its transactions and a thread writer whose transactions wait until the
worker loop waits for them (deferred commits), a worker's input of constructed messages, and a
worker loop over them fed by hand."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa
from confluent_kafka import Message
from sparsewatch.consumers.worker import WorkerLoop
from sparsewatch.consumers.writer import Destination, Pending, ThreadWriter, WriteJob
from sparsewatch.storage.store import Store, StoreTx

from sparsewatch.config import Config
from sparsewatch.runner import build_worker

WAIT_S = 60.0
IDLE_AT = 100.0  # the loop's clock when every stream has gone quiet
INPUT_TOPIC = {"detector": "docs", "anomaly": "scores"}  # a worker's input, by its role


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


@dataclass
class WorkerInput:
    """A worker's role (``detector`` or ``anomaly``), its configuration and the messages of its
    input topic."""

    role: str
    config: Config
    messages: list[Message]

    @property
    def topic(self) -> str:
        return self.config.kafka.topic(INPUT_TOPIC[self.role])

    @property
    def group(self) -> str:
        return f"{self.config.kafka.group_id}.{self.role}"

    def loop(self, store: CountingStore, gated: bool) -> WorkerLoop:
        """The worker's loop over ``store`` (see :func:`loop_over`)."""
        return loop_over(self.role, self.config, store, gated)


def open_counting(url: str) -> CountingStore:
    """The :class:`CountingStore` of the database at ``url``."""
    store = CountingStore.open(url)
    assert isinstance(store, CountingStore)
    return store


def loop_over(role: str, config: Config, store: CountingStore, gated: bool) -> WorkerLoop:
    """The ``role`` worker's loop writing into ``store`` through the thread writer, gated (each
    transaction in flight until the loop waits for it) or not."""
    worker = build_worker(role, config, store)
    writer = GatedWriter if gated else ThreadWriter
    worker._writer = writer(store, worker.destination, role)
    return worker


def feed(worker: WorkerLoop, messages: list[Message], batch: int) -> None:
    """``messages`` in batches, as ``run()`` hands them over; one message a batch, each batch's
    transaction is waited for before the next (every window is then committed alone)."""
    for lo in range(0, len(messages), batch):
        worker._process(messages[lo : lo + batch], now=lo / 1e6)
        if batch == 1:
            worker._wait_written()


def finish(worker: WorkerLoop) -> None:
    """Every stream goes quiet (its partitions read up to date past the idle timeout): each is
    checkpointed, and the resume offsets reach the end of the input; the writer is closed."""
    for part in worker._partitions.values():
        part.read_up_to_at = IDLE_AT
    worker._process([], IDLE_AT)
    worker._wait_written()
    assert worker._writer is not None
    worker._writer.close()


def run_through(
    data: WorkerInput, store: CountingStore, messages: list[Message], batch: int, gated: bool
) -> None:
    """``messages`` fed in batches of ``batch`` (:func:`feed`) to ``data``'s worker loop over
    ``store``, gated or not, then every stream quiet (:func:`finish`)."""
    worker = data.loop(store, gated)
    feed(worker, messages, batch)
    finish(worker)
