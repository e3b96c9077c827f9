"""Stand-ins for a worker loop's processor and stream state (one stream ``s``, each item its raw
payload, nothing buffered or checkpointed), and the consumer-lag gauge the loop reports."""

from __future__ import annotations

from typing import Any

import numpy as np
from prometheus_client import REGISTRY
from sparsewatch.consumers.processor import Output


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
