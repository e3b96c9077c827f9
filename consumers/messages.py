"""The document message on ``<prefix>.docs``: parsing and validation, with a reason for refusals.

A message is a UTF-8 JSON object ``{"id": str, "text": str, "timestamp": ISO-8601 | epoch ms,
"stream": str (optional, "default"), "labels": [str] (optional), "meta": {} (optional)}``, or an
end-of-stream marker ``{"stream": str, "end_of_stream": true}`` (sent by ``sparsewatch replay
--end-of-stream`` after a bounded corpus: the detector closes the stream's open windows at once
instead of after the idle timeout, like the final watermark of a bounded source). A marker
carries no field of a document: one that does is refused, not taken for a bare marker with its
document dropped unseen.
:func:`parse_message` and :func:`parse_document` raise nothing but :class:`InvalidMessageError`,
whose ``reason`` goes to the dead-letter topic with the original bytes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

MAX_ID_CHARS = 512
MAX_STREAM_CHARS = 128
# Event times outside [1970, 2200) are refused: they are corrupt, and would make windows explode.
MIN_EPOCH_MS = 0
MAX_EPOCH_MS = 7_258_118_400_000
# Read as milliseconds, epoch *seconds* from 2001 to 5138 fall in 1970-01-12..1973-03-03.
_SECONDS_AS_MS = (10**9, 10**11)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
# The fields of a document message besides its stream (see Document.to_json).
_DOCUMENT_FIELDS = ("id", "text", "timestamp", "labels", "meta")


def looks_like_epoch_seconds(ms: int) -> bool:
    """Whether an event time of ``ms`` epoch milliseconds is more likely epoch seconds sent by
    mistake (1970-01-12..1973-03-03 as milliseconds; the message format counts milliseconds)."""
    return _SECONDS_AS_MS[0] <= ms < _SECONDS_AS_MS[1]


class RecordError(ValueError):
    """A record's fields do not make a document; the message is the reason."""


class InvalidMessageError(ValueError):
    """A message that cannot become a document; ``reason`` says why, in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Document:
    """One validated document. ``timestamp_ms`` is the event time in epoch milliseconds (UTC)."""

    id: str
    text: str
    timestamp_ms: int
    stream: str = "default"
    labels: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def event_time(self) -> datetime:
        """The event time as a timezone-aware UTC datetime."""
        return datetime.fromtimestamp(self.timestamp_ms / 1000.0, tz=UTC)

    def to_json(self) -> bytes:
        """The canonical message bytes for this document (:func:`parse_document` reads them
        back as this document)."""
        doc = {
            "id": self.id,
            "text": self.text,
            "timestamp": self.timestamp_ms,
            "stream": self.stream,
            "labels": list(self.labels),
            "meta": self.meta,
        }
        return encode(doc)


def encode(message: dict[str, Any]) -> bytes:
    """The message's bytes on the topic (compact UTF-8 JSON). An unpaired surrogate, which only
    ``meta`` may hold (the detector ignores it;
    :func:`~sparsewatch.consumers.field_mapping.to_document` refuses one anywhere else), is
    written as the JSON escape it came from (``\\ud83d``: a tweet cut inside an emoji): the
    detector reads it back as the same string."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class EndOfStream:
    """The marker that nothing more of ``stream`` follows (see the module docstring)."""

    stream: str = "default"

    def to_json(self) -> bytes:
        """The canonical marker bytes."""
        return json_bytes({"stream": self.stream, "end_of_stream": True})


def parse_timestamp(value: Any) -> int:
    """Epoch milliseconds from an ISO-8601 string (naive means UTC) or an epoch-ms number."""
    if isinstance(value, bool):
        raise InvalidMessageError("timestamp must be an ISO-8601 string or epoch milliseconds")
    if isinstance(value, int):
        ms = value  # any size: the range check below refuses it (a float of it overflowed)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidMessageError("timestamp is not finite")
        ms = math.floor(value)  # int() took -0.9 ms, before 1970, for 0
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidMessageError(f"timestamp {value[:40]!r} is not ISO-8601") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        # A fraction of a millisecond is cut off, as from a number, in exact arithmetic:
        # round(timestamp() * 1000) put 23:59:59.9996 into the next day's window (and
        # 1969-12-31T23:59:59.9996Z at 0 ms, in 1970)
        ms = (parsed - _EPOCH) // _ONE_MS
    else:
        raise InvalidMessageError("timestamp must be an ISO-8601 string or epoch milliseconds")
    if not MIN_EPOCH_MS <= ms < MAX_EPOCH_MS:
        raise InvalidMessageError(f"timestamp {_shown_ms(ms)} is outside 1970..2200")
    return ms


def _shown_ms(ms: int) -> str:
    """``ms`` for a reason: a huge number (JSON allows 4,300 digits) by its size."""
    return f"{ms} ms" if abs(ms) < 10**20 else f"of {len(str(abs(ms)))} digits"


def string_field(obj: dict[str, Any], key: str, max_chars: int, default: str | None = None) -> str:
    """Field ``key`` of a message: a non-empty, storable string of at most ``max_chars``."""
    value = obj.get(key, default)
    if value is None:
        raise InvalidMessageError(f"missing field '{key}'")
    if not isinstance(value, str):
        raise InvalidMessageError(f"field '{key}' must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidMessageError(f"field '{key}' is empty")
    if len(value) > max_chars:
        raise InvalidMessageError(f"field '{key}' is longer than {max_chars} characters")
    return storable_string(value, key)


def storable_string(value: str, key: str) -> str:
    """``value`` (field ``key``) if it can be stored and re-sent as UTF-8, else
    :class:`InvalidMessageError` with the reason (see :func:`_utf8`)."""
    _utf8(value, key)
    return value


def _utf8(value: str, key: str) -> bytes:
    """The UTF-8 bytes of a storable ``value``: JSON escapes can smuggle in unpaired surrogates
    (``"\\ud800"``: no UTF-8 form) and NUL characters (refused by PostgreSQL text)."""
    if "\x00" in value:
        raise InvalidMessageError(f"field '{key}' contains a NUL character")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(
            f"field '{key}' contains an unpaired surrogate at character {exc.start}"
        ) from None


def decode_json_object(data: bytes, what: str = "message") -> dict[str, Any]:
    """The JSON object in ``data`` (UTF-8; ``what`` it is, for the reasons: a message, a line);
    an :class:`InvalidMessageError` says what is wrong with it, in the words the workers, the
    ingest bridge and the replay tool all use."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidMessageError(f"not UTF-8 (byte {exc.start} of the {what})") from None
    except json.JSONDecodeError as exc:
        where = (
            f"column {exc.colno}" if exc.lineno == 1 else f"line {exc.lineno}, column {exc.colno}"
        )
        raise InvalidMessageError(f"invalid JSON: {exc.msg} ({where})") from None
    except ValueError as exc:  # e.g. an integer of more digits than int() converts
        reason = str(exc).split(";")[0]  # without advice on Python's own settings
        raise InvalidMessageError(f"invalid JSON: {reason}") from None
    except RecursionError:
        raise InvalidMessageError("invalid JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise InvalidMessageError(f"not a JSON object but {type(obj).__name__}")
    return obj


def _decode_object(payload: bytes | None, max_text_bytes: int) -> dict[str, Any]:
    if payload is None:
        raise InvalidMessageError("empty message (null value)")
    # A guard before parsing, not the text limit (checked on the decoded text): JSON may escape
    # a byte of text as "\\u00XX", six bytes, and the other fields get 64 kB.
    if len(payload) > 6 * max_text_bytes + 64_000:
        raise InvalidMessageError(f"message of {len(payload)} bytes exceeds the size limit")
    return decode_json_object(payload)


def parse_document(payload: bytes | None, max_text_bytes: int = 100_000) -> Document:
    """Validate one document message; raise :class:`InvalidMessageError` with the reason."""
    return _document(_decode_object(payload, max_text_bytes), max_text_bytes)


def parse_message(payload: bytes | None, max_text_bytes: int = 100_000) -> Document | EndOfStream:
    """A document or an end-of-stream marker; :class:`InvalidMessageError` otherwise."""
    obj = _decode_object(payload, max_text_bytes)
    if "end_of_stream" not in obj:
        return _document(obj, max_text_bytes)
    if obj["end_of_stream"] is not True:
        raise InvalidMessageError("field 'end_of_stream' must be true")
    carried = [key for key in _DOCUMENT_FIELDS if key in obj]
    if carried:
        raise InvalidMessageError(
            "an end-of-stream marker carries no document fields: "
            + ", ".join(f"'{key}'" for key in carried)
        )
    return EndOfStream(string_field(obj, "stream", MAX_STREAM_CHARS, default="default"))


def _document(obj: dict[str, Any], max_text_bytes: int) -> Document:
    doc_id = string_field(obj, "id", MAX_ID_CHARS)
    if "text" not in obj:
        raise InvalidMessageError("missing field 'text'")
    text = obj["text"]
    if not isinstance(text, str):
        raise InvalidMessageError(f"field 'text' must be a string, got {type(text).__name__}")
    if len(_utf8(text, "text")) > max_text_bytes:
        raise InvalidMessageError(f"text longer than {max_text_bytes} bytes")
    if "timestamp" not in obj:
        raise InvalidMessageError("missing field 'timestamp'")
    timestamp_ms = parse_timestamp(obj["timestamp"])
    stream = string_field(obj, "stream", MAX_STREAM_CHARS, default="default")
    labels = obj.get("labels", [])
    if labels is None:
        labels = []
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise InvalidMessageError("field 'labels' must be a list of strings")
    for label in labels:
        storable_string(label, "labels")
    meta = obj.get("meta", {})
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise InvalidMessageError("field 'meta' must be an object")
    return Document(doc_id, text, timestamp_ms, stream, tuple(labels), meta)


def json_bytes(obj: Any) -> bytes:
    """Compact JSON for result messages."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
