"""What the worker loop (:mod:`sparsewatch.consumers.worker`) runs, and what it gets back: a
:class:`Processor` parses messages and makes a :class:`StreamState` per stream, whose closed
windows come back as :class:`Output` (SQL writes as data, downstream messages, dead letters). A
processor never sees Kafka or SQL."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from sparsewatch.consumers.writer import Messages, StoreCall


@dataclass
class Output:
    """What one closed window produces: SQL writes and messages for a downstream topic.

    ``calls`` are the :class:`~sparsewatch.storage.store.StoreTx` writes of its results, as data
    (they run on the writer while the next window is computed, possibly in another process).
    ``dead`` are dead letters the state found only now (messages it had accepted and can no longer
    use), as rows with ``partition``, ``offset``, ``reason`` and ``payload``; the loop adds the
    input topic. ``late`` counts the late documents it stores (scored, not learnt from); a late
    document read again after a restore that its first reading stored is neither scored nor
    stored again.
    ``summary`` says which window it was and what it found, for the log line written when its
    transaction has committed. ``window`` is the window's (stream, number) and ``late_ids`` the
    (stream, id) of the late documents it stores: the keys the metrics count each once by
    (:class:`~sparsewatch.consumers.metrics.WorkerMetrics`).
    """

    calls: list[StoreCall] = field(default_factory=list)
    messages: Messages = field(default_factory=list)
    dead: list[dict[str, Any]] = field(default_factory=list)
    n_documents: int = 0
    closed_at: float = field(default_factory=time.perf_counter)
    novel: int = 0
    is_window: bool = True
    late: int = 0
    summary: str = ""
    window: tuple[str, int] | None = None
    late_ids: list[tuple[str, str]] = field(default_factory=list)


class StreamState(Protocol):
    """The per-stream state a processor keeps (windows + models)."""

    def add(self, item: Any, partition: int, offset: int, now: float) -> list[Output]:
        """Take ``item``; the outputs of the windows it closed. Raises
        :class:`~sparsewatch.consumers.messages.InvalidMessageError`, before changing anything,
        for an item inconsistent with the stream (it goes to the dead letters)."""
        ...

    def close_idle(self, silent_until: float, wall_ms: float) -> list[Output]:
        """The outputs of the windows a stream idle (no message of it read) from its last one
        until ``silent_until`` closes: everything its partition held then has been read (see
        :meth:`~sparsewatch.consumers.worker.WorkerLoop._lagging_partitions`), so its next message
        cannot be in a backlog. ``wall_ms`` is the wall-clock time (epoch ms) of
        ``silent_until``."""
        ...

    def min_buffered_offset(self, partition: int) -> int | None: ...

    def forget_before(self, partition: int, offset: int) -> None:
        """The stored resume offset of ``partition`` is ``offset``: its messages before it are
        never read again, so what the state keeps to judge them the same way on a re-read (the
        verdicts on duplicates) can go."""
        ...

    def checkpoint(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]: ...


class Processor(Protocol):
    """Turns raw messages into items and owns the construction of per-stream states.
    ``idle_timeout_s``: how long a stream must be quiet to count as idle (see the docstring of
    :mod:`sparsewatch.consumers.worker`)."""

    name: str
    idle_timeout_s: float
    alert_kinds: tuple[str, ...]  # the kinds of alert its states raise (``alerts.kind``)

    def parse(self, payload: bytes | None, kafka_ms: int | None) -> Any:
        """The item of a message; ``kafka_ms`` is its Kafka timestamp (epoch ms, None when the
        broker has none). Raises for a message to dead-letter."""
        ...

    def stream_of(self, item: Any) -> str: ...

    def ends_stream(self, item: Any) -> bool:
        """Whether ``item`` says its stream has ended (an end-of-stream marker)."""
        ...

    def new_state(self, stream: str, checkpoint: Any | None) -> StreamState: ...
