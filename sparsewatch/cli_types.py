"""Parameter types and the configuration lookup shared by the CLI commands."""

from __future__ import annotations

import math
from typing import Any

import click

from sparsewatch.config import Config, load_config


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


class TopicNumber(click.IntRange):
    """A topic number, also as an alert names it (``topic-113``, the subject of an
    ``emerging_topic`` alert): copying the subject was refused as no integer."""

    name = "topic number"

    def __init__(self) -> None:
        super().__init__(0, 2**31 - 1)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not (isinstance(value, str) and value.strip().lower().startswith("topic-")):
            return super().convert(value, param, ctx)
        number = value.strip()[len("topic-") :]
        if not number.isdecimal():
            self.fail(f"{value!r} is not a topic number (ID or topic-ID).", param, ctx)
        return super().convert(int(number), param, ctx)


def utf8_text(_ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A text option (one value, several, or none) the database can be asked for; a usage error
    for bytes that are not UTF-8 (a Latin-1 terminal's: click keeps them as surrogate escapes,
    which the database driver refused with a UnicodeEncodeError)."""
    for text in value if isinstance(value, tuple) else (value,):
        if text is None:
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise click.BadParameter(
                f"{text!r} is not UTF-8 text (character {exc.start + 1})", param=param
            ) from None
    return value


def not_blank(_ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """An option (one value, several, or none) that names something: a usage error for a blank
    value, which would otherwise mean the default (``--bootstrap-servers ""``) or match nothing
    and reject every record (``--id-field ""``)."""
    for text in value if isinstance(value, tuple) else (value,):
        if text is not None and not text.strip():
            raise click.BadParameter("cannot be blank", param=param)
    return value


def utf8_name(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """:func:`not_blank` and :func:`utf8_text`: a name the database is asked for."""
    return utf8_text(ctx, param, not_blank(ctx, param, value))


def command_config(ctx: click.Context) -> Config:
    """The configuration of a command: the file of the group's ``--config`` (or
    ``SPARSEWATCH_CONFIG``) under the ``SPARSEWATCH_*`` environment variables; none when the
    command is invoked without the ``cli`` group (no context object)."""
    return load_config(ctx.obj.get("config_path") if ctx.obj else None)
