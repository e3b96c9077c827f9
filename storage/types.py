"""Portable column types: timezone-aware UTC datetimes and JSON stored as text.

SQLite has no timestamp type: SQLAlchemy stores ``DateTime`` as ISO text and gives back naive
values. :class:`UTCDateTime` binds every value as UTC (naive on SQLite, aware on PostgreSQL's
``timestamptz``) and always returns timezone-aware UTC datetimes, so both databases round-trip the
same values and text comparison on SQLite orders correctly.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Dialect


def _json_default(value: Any) -> Any:
    """numpy scalars and arrays as plain JSON values (anything else is an error)."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A ``DateTime(timezone=True)`` that accepts only aware datetimes and returns aware UTC."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()}: pass a timezone-aware value")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_json_default)


class JSONText(sa.types.TypeDecorator[Any]):
    """JSON kept as text (``TEXT`` on both databases), serialised with sorted keys."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return _ENCODER.encode(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)
