"""Python values for the store's columns: nullable numbers, JSON lists, required keys.

Values may be numpy scalars (they are converted to Python numbers); a NaN is stored as NULL, or
refused where the column is NOT NULL, alike on both databases.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def opt_float(value: Any) -> float | None:
    """``value`` as a float for a nullable column; NaN is NULL on both databases (SQLite made it
    NULL itself, PostgreSQL kept NaN)."""
    number = None if value is None else float(value)
    return None if number is None or math.isnan(number) else number


def required_float(value: Any, what: str) -> float:
    """``value`` as a float for a NOT NULL column; NaN is refused on both databases (SQLite failed
    on the NOT NULL constraint, PostgreSQL stored it)."""
    number = float(value)
    if math.isnan(number):
        raise ValueError(f"{what} is NaN")
    return number


def opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def int_list(values: Any) -> list[int]:
    return [] if values is None else [int(v) for v in values]


def str_list(values: Any) -> list[str]:
    return [] if values is None else [str(v) for v in values]


def require_keys(row: Mapping[str, Any], keys: Sequence[str], what: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise KeyError(f"{what} row lacks {', '.join(missing)}: {sorted(row)}")
