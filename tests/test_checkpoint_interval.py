"""How often a stream is checkpointed so that a crash's re-read fits in its topic's retention."""

from __future__ import annotations

import itertools

from sparsewatch.runner import checkpoints_within

HOUR = 3_600_000


def _brute_force(retention: float, size: float, lateness: float, every: int) -> int:
    """The largest n <= every whose re-read (n windows and the lateness) fits in half the
    retention; 1 when none does."""
    fitting = [n for n in range(1, every + 1) if n * size + lateness <= retention / 2]
    return max(fitting, default=1)


def test_the_paper_default_on_a_default_kafka_topic() -> None:
    # 1-day windows, a checkpoint due every 10 windows, Kafka's default 7-day retention: a
    # crash would re-read up to 10 days; every 3 days keeps it within 3.5.
    assert checkpoints_within(7 * 24 * HOUR, 24 * HOUR, 0, 10) == 3


def test_matches_a_brute_force_search() -> None:
    retentions = [0, 0.5 * HOUR, HOUR, 2 * HOUR, 7 * HOUR, 24 * HOUR, 168 * HOUR]
    sizes = [0.25 * HOUR, HOUR, 6 * HOUR, 24 * HOUR]
    latenesses = [0, 0.5 * HOUR, 3 * HOUR]
    for retention, size, lateness, every in itertools.product(
        retentions, sizes, latenesses, [1, 3, 10]
    ):
        expected = _brute_force(retention, size, lateness, every)
        assert checkpoints_within(retention, size, lateness, every) == expected, (
            retention,
            size,
            lateness,
            every,
        )
