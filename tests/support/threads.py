"""One call made in several threads at once, and what each of them came to."""

from __future__ import annotations

import threading
from collections.abc import Callable


def outcomes_in_threads(call: Callable[[], object], n: int) -> list[object]:
    """``call`` made in ``n`` threads at once: what each returned or raised, in the order they
    ended."""
    outcomes: list[object] = []

    def run() -> None:
        try:
            outcomes.append(call())
        except BaseException as exc:  # an outcome as any other, for the caller to assert on
            outcomes.append(exc)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes
