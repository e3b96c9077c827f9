"""Parameter types shared by the CLI commands."""

from __future__ import annotations

import math
from typing import Any

import click


class _Finite:
    """Refuses ``nan`` and ``inf`` after the float conversion of the class it is mixed into."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)  # type: ignore[misc]
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)  # type: ignore[attr-defined]
        return number


class FiniteFloat(_Finite, click.types.FloatParamType):
    """A float that is not ``nan`` or ``inf``, without bounds (a bound-less
    :class:`FiniteFloatRange` showed ``[x<=None]`` in the help)."""

    name = "finite float"


class FiniteFloatRange(_Finite, click.FloatRange):
    """:class:`click.FloatRange` that also refuses ``nan`` and ``inf``: ``nan`` passes every range
    comparison, so ``--rate nan`` was accepted and silently meant "no rate"."""

    name = "finite float range"
