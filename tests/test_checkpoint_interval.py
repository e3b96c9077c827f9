"""How old a stream's checkpoint may grow so that a crash's re-read fits in its topic's retention.

A simulated live stream (event time = the topic's time): its windows close every ``size``; at a
close the worker checkpoints when the checkpoint is at least the limit old, and its replay anchor
is then, at worst, a window span (``size + lateness``) older than the checkpoint. A crash at any
moment re-reads from the anchor: the longest re-read must fit in half the retention.
"""

from __future__ import annotations

import itertools

from sparsewatch.runner import checkpoint_age_limit_s

HOUR = 3_600_000


def _longest_reread_ms(limit_ms: float, size_ms: float, lateness_ms: float) -> float:
    span = size_ms + lateness_ms
    checkpoint, anchor, longest = 0.0, -span, 0.0
    for k in range(1, 2000):
        close = k * size_ms
        longest = max(longest, close - anchor)  # a crash just before this close
        if close - checkpoint >= limit_ms:
            checkpoint, anchor = close, close - span
    return longest


def test_the_longest_reread_of_a_live_stream_fits_in_half_the_retention() -> None:
    for retention, size, lateness in itertools.product(
        [7 * 24 * HOUR, 24 * HOUR, 7 * HOUR, 2 * HOUR],
        [0.25 * HOUR, HOUR, 6 * HOUR, 24 * HOUR],
        [0, 0.5 * HOUR, 3 * HOUR],
    ):
        limit_ms = checkpoint_age_limit_s(retention, size, lateness) * 1000
        if limit_ms == 0:  # a checkpoint with every window: the re-read is the open window
            continue
        assert _longest_reread_ms(limit_ms, size, lateness) <= retention / 2, (
            retention,
            size,
            lateness,
        )


def test_the_paper_default_on_a_default_kafka_topic() -> None:
    # 1-day windows on Kafka's default 7-day retention: a checkpoint at most 1.5 days old, so a
    # live stream is checkpointed every 2 windows (windows.checkpoint_every = 10 would re-read
    # up to 11 days after a crash, of which 4 were deleted)
    limit_s = checkpoint_age_limit_s(7 * 24 * HOUR, 24 * HOUR, 0)
    assert limit_s == 1.5 * 24 * 3600
    assert _longest_reread_ms(limit_s * 1000, 24 * HOUR, 0) == 3 * 24 * HOUR


def test_no_room_means_a_checkpoint_with_every_window() -> None:
    assert checkpoint_age_limit_s(HOUR, HOUR, 0) == 0
    assert checkpoint_age_limit_s(0, HOUR, 0) == 0
