"""Stand-ins for a worker loop's processor and stream state (one stream ``s``, each item its raw
payload, nothing buffered or checkpointed), a worker loop around them on a backlog of a real
broker, any worker loop running on a thread, and the consumer-lag gauge the loop reports."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import REGISTRY
from sparsewatch.consumers.processor import Output
from sparsewatch.consumers.worker import WorkerLoop
from sparsewatch.storage.store import Store

from tests.support.kafka_topics import produce_messages


class QuietState:
    """A stream state that buffers nothing and never closes a window; a subclass that closes
    windows overrides :meth:`add`."""

    def add(self, item: Any, partition: int, offset: int, now: float) -> list[Output]:
        return []

    def close_idle(self, silent_until: float, wall_ms: float) -> list[Output]:
        return []

    def min_buffered_offset(self, partition: int) -> int | None:
        return None

    def forget_before(self, partition: int, offset: int) -> None:
        pass

    def checkpoint(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return {}, {}


class OneStreamProcessor:
    """A processor of one stream, ``s``, whose items are the messages' payloads and whose states
    are :class:`QuietState`; a subclass names itself (``name``, the worker's metrics label) and
    overrides :meth:`new_state` for other states."""

    name: str
    idle_timeout_s = 600.0
    alert_kinds: tuple[str, ...] = ("anomaly",)

    def parse(self, payload: bytes | None, kafka_ms: int | None = None) -> Any:
        return payload

    def stream_of(self, item: Any) -> str:
        return "s"

    def ends_stream(self, item: Any) -> bool:
        return False

    def new_state(self, stream: str, checkpoint: Any | None) -> QuietState:
        return QuietState()


def consumer_lag(worker: str) -> float | None:
    """The ``sparsewatch_consumer_lag`` gauge of ``worker`` (None: never set)."""
    return REGISTRY.get_sample_value("sparsewatch_consumer_lag", {"worker": worker})


def produce_backlog(bootstrap: str, topic: str, n: int) -> None:
    """A new one-partition ``topic`` holding ``n`` messages (``0`` to ``n - 1``, keyed ``s``)."""
    produce_messages(bootstrap, topic, ((b"s", str(i).encode()) for i in range(n)))


def stub_worker(
    processor: OneStreamProcessor, store: Store, bootstrap: str, prefix: str, **options: Any
) -> WorkerLoop:
    """A worker loop of ``processor`` reading one partition of ``{prefix}.docs`` in group
    ``{prefix}.g``, its dead letters to ``{prefix}.dlq``, no alerts topic; ``options`` are
    :class:`WorkerLoop`'s."""
    return WorkerLoop(
        processor,
        store,
        bootstrap,
        f"{prefix}.g",
        f"{prefix}.docs",
        None,
        f"{prefix}.dlq",
        partitions=1,
        **options,
    )


class Running:
    """A worker loop running on a thread until :meth:`stop`."""

    def __init__(self, worker: WorkerLoop) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:  # re-raised by stop()
            self.error = exc

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(60)
        if self.error is not None:
            raise self.error


@contextmanager
def running_on_backlog(
    processor: OneStreamProcessor, bootstrap: str, db: Path, n: int, **options: Any
) -> Iterator[Running]:
    """``processor``'s worker loop (:func:`stub_worker`; the thread writer, a checkpoint every
    1,000 windows, ``options``) running over a backlog of ``n`` messages on a new topic, its
    store the SQLite file ``db``; stopped on the way out."""
    prefix = f"{processor.name}-{uuid.uuid4().hex[:8]}"
    produce_backlog(bootstrap, f"{prefix}.docs", n)
    with Store.open(f"sqlite:///{db}") as store:
        options = {"checkpoint_every": 1000, "writer": "thread", **options}
        running = Running(stub_worker(processor, store, bootstrap, prefix, **options))
        try:
            yield running
        finally:
            running.stop()
