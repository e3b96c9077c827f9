"""The replay reader cuts a fraction of a millisecond off a date, as the detector's parser does
(and as its docstring said): it rounded, so ``23:59:59.9996`` went into the next day's window and
a Reuters ``.9996`` into the next second."""

from __future__ import annotations

import pytest
from sparsewatch.consumers.messages import parse_timestamp
from sparsewatch.consumers.timestamps import parse_timestamp_ms

DAY_END_MS = 1_798_761_599_999  # 2026-12-31T23:59:59.999Z


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-31T23:59:59.9996Z",
        "2026-12-31T23:59:59.999999+00:00",
        "2027-01-01T05:29:59.9995+05:30",
        "2026-12-31 23:59:59.9999",
    ],
)
def test_iso_dates_cut_to_the_millisecond_like_the_detector(text: str) -> None:
    assert parse_timestamp_ms(text) == DAY_END_MS == parse_timestamp(text)


def test_a_reuters_fraction_stays_in_its_second() -> None:
    base = parse_timestamp_ms("26-FEB-1987 15:01:01")
    assert parse_timestamp_ms("26-FEB-1987 15:01:01.9996") == base + 999
    assert parse_timestamp_ms("26-FEB-1987 15:01:01.79") == base + 790
    assert parse_timestamp_ms("26-FEB-1987 15:01:01.5") == base + 500
    assert parse_timestamp_ms("26-FEB-1987 15:01:01.0571") == base + 57
