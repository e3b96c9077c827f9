"""What the corpus readers yield per record: a :class:`SourceRecord` (the raw fields, with the
source file and the line where the record starts) or a :class:`Rejected` (why it could not be
read, where), and the raw text a rejection keeps (:func:`raw_text`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RAW_CHARS = 2000  # raw text kept per rejected record in the error file


@dataclass(frozen=True)
class SourceRecord:
    """The raw fields of one input record."""

    source: str
    line: int
    fields: dict[str, Any]


@dataclass(frozen=True)
class Rejected:
    """A record that could not be read or mapped."""

    source: str
    line: int
    reason: str
    raw: str = ""


def raw_text(line: bytes | str) -> str:
    """A rejected record's text (``line``, bytes as UTF-8) for the error file: its line end
    left out, cut to :data:`RAW_CHARS`."""
    text = line.decode("utf-8", "backslashreplace") if isinstance(line, bytes) else line
    return text.rstrip("\r\n")[:RAW_CHARS]
