"""Parameter types shared by the CLI commands."""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloat(click.types.FloatParamType):
    """A float that is not ``nan`` or ``inf``, without bounds (a bound-less
    :class:`FiniteFloatRange` showed ``[x<=None]`` in the help)."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class FiniteFloatRange(click.FloatRange):
    """:class:`click.FloatRange` that also refuses ``nan`` and ``inf``: ``nan`` passes every range
    comparison, so ``--rate nan`` was accepted and silently meant "no rate"."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number
