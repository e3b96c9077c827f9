"""From a source record to a document message: :func:`to_document` maps a record's raw fields
(a line of a corpus file, or a JSON message of an external Kafka topic that the ingest bridge
reads) onto the document message of DESIGN.md::

    {"id": str, "text": str, "timestamp": epoch ms, "stream": str, "labels": [str], "meta": {}}

as a :class:`FieldMapping` says (named fields, paths into nested objects, the first present of
several candidates), and makes a document only when the detector will accept it and the producer
can send it: the detector's limits apply (``max_text_bytes`` as configured), so a record it would
dead-letter is a :class:`~sparsewatch.consumers.messages.RecordError` here, with the reason.
:func:`parse_json_object` reads a record's JSON object, :func:`parse_labels` its labels.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from sparsewatch.consumers.messages import (
    MAX_ID_CHARS,
    MAX_STREAM_CHARS,
    InvalidMessageError,
    RecordError,
    decode_json_object,
    parse_document,
    storable_string,
)
from sparsewatch.consumers.timestamps import parse_timestamp_ms

from sparsewatch.config import Config

# The producer's message limit (librdkafka's ``message.max.bytes``, 1,000,000 by default), which it
# checks on the key, the value, the headers and a record's 36 bytes of framing: a larger document
# message is refused when handed over (the ingest bridge stopped there, at every restart again).
MAX_MESSAGE_BYTES = 1_000_000
RECORD_OVERHEAD_BYTES = 36
DEFAULT_MAX_TEXT_BYTES = Config.max_text_bytes  # the detector's text limit unless configured


@dataclass(frozen=True)
class MessageLimit:
    """The largest document message its destination takes, measured as the producer measures a
    message (its key, its value and :data:`RECORD_OVERHEAD_BYTES`), and the words a refusal
    names it with: the producer's own limit, or a smaller topic's
    (:meth:`~sparsewatch.consumers.kafka_admin.TopicLimits.message_limit`)."""

    max_bytes: int = MAX_MESSAGE_BYTES
    name: str = f"the Kafka producer's limit of {MAX_MESSAGE_BYTES} bytes (message.max.bytes)"


PRODUCER_LIMIT = MessageLimit()
"""The producer's own limit: a destination that takes every message the producer sends."""


@dataclass(frozen=True)
class FieldMapping:
    """Which input fields make the document's fields (``None``: the first present candidate).

    ``text`` may name several fields: their non-empty values are joined with a blank line (for
    example a title and a body); one given as ``a|b`` is the first of ``a`` and ``b`` present
    (a long tweet's ``extended_tweet.full_text``, else its ``text``). Without ``text``, ``text``
    is used when present, else ``title`` and ``body``. Labels may be a list or a string split on
    ``;`` or ``|``. A numeric timestamp counts ``timestamp_unit_ms`` milliseconds per unit (1:
    epoch milliseconds, 1000: seconds).
    """

    id: str | None = None
    text: tuple[str, ...] = ()
    timestamp: str | None = None
    stream: str | None = None
    labels: str | None = None
    default_stream: str = "default"
    timestamp_unit_ms: int = 1


_CANDIDATES = {
    "id": ("id", "doc_id", "newid", "NEWID"),
    "timestamp": ("timestamp", "date", "time", "created_at", "event_time"),
    "stream": ("stream",),
    "labels": ("labels", "topics", "label"),
}


def parse_json_object(data: bytes, what: str = "line") -> dict[str, Any]:
    """The JSON object in ``data`` (UTF-8; a ``what``: a line, a message); a RecordError says
    what is wrong with it (:func:`~sparsewatch.consumers.messages.decode_json_object`)."""
    try:
        return decode_json_object(data, what)
    except InvalidMessageError as exc:
        raise RecordError(exc.reason) from None


def _pick(fields: dict[str, Any], name: str | None, what: str) -> tuple[str | None, Any]:
    """(field name, value) of the named field, or of the first present candidate for ``what``;
    ``(None, None)`` when absent. A name with dots that is not a field of its own is a path into
    nested objects (``user.screen_name``), as in a tweet's JSON."""
    if name is not None:
        if name in fields:
            return name, fields[name]
        value: Any = fields
        for part in name.split("."):
            if not isinstance(value, dict) or part not in value:
                return None, None
            value = value[part]
        return name, value
    for candidate in _CANDIDATES[what]:
        if candidate in fields:
            return candidate, fields[candidate]
    return None, None


def parse_labels(value: Any) -> list[str]:
    """Labels from a list of strings (or integers), a string that is a JSON list of strings (a
    CSV cell of ``sparsewatch documents --format csv``), or a string split on ``;`` or ``|``; a
    RecordError otherwise. An empty or blank label is no label, in a list as in a string: ``[""]``
    was one label ``""`` where ``""`` was none (the offline evaluation took such a document for
    one of a known topic)."""
    if value is None or value == "":
        return []
    if isinstance(value, str) and (listed := _json_label_list(value)) is not None:
        return _non_blank(listed)
    if isinstance(value, str):
        return [part.strip() for part in re.split(r"[;|]", value) if part.strip()]
    if isinstance(value, list) and all(isinstance(x, str | int) for x in value):
        return _non_blank([str(x) for x in value])
    raise RecordError("labels must be a list of strings or a ';'-separated string")


def _non_blank(labels: list[str]) -> list[str]:
    """``labels`` without the empty and whitespace-only ones, the others as they are."""
    return [label for label in labels if label.strip()]


def _json_label_list(value: str) -> list[str] | None:
    """The labels of ``value`` when it is a JSON list of strings (``["a", "b"]``: how
    ``sparsewatch documents --format csv`` writes a document's labels, which were read back as
    one label ``["a", "b"]``); ``None`` for any other text."""
    if not value.lstrip().startswith("["):
        return None
    try:
        listed = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(listed, list) or not all(isinstance(x, str | int) for x in listed):
        return None
    return [str(x) for x in listed]


def _first_text(fields: dict[str, Any], spec: str) -> tuple[str, Any] | None:
    """(name, value) of the first present field of ``spec``, names separated by ``|``
    (``extended_tweet.full_text|text``: a long tweet's whole text, else its text); ``None``."""
    for name in spec.split("|"):
        value = _pick(fields, name, "text")[1]
        if value is not None:
            return name, value
    return None


def to_document(
    fields: dict[str, Any],
    mapping: FieldMapping = FieldMapping(),
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    timestamp_ms: int | None = None,
    limit: MessageLimit = PRODUCER_LIMIT,
) -> dict[str, Any]:
    """The document message for one record's raw fields; a RecordError says what is wrong,
    including why the detector (whose text limit is ``max_text_bytes``) would refuse it, or its
    destination (whose message ``limit`` is the producer's own, or a smaller topic's) would not
    take it. A given ``timestamp_ms`` (a Kafka record's own timestamp) is the event time; no
    field is read for it.
    """
    used: set[str] = set()
    id_name, doc_id = _pick(fields, mapping.id, "id")
    if id_name is None or doc_id is None or str(doc_id).strip() == "":
        raise RecordError(f"missing id field '{mapping.id or '/'.join(_CANDIDATES['id'])}'")
    if not isinstance(doc_id, str | int) or isinstance(doc_id, bool):
        raise RecordError(f"id must be a string or an integer, got {type(doc_id).__name__}")
    used.add(id_name)
    text_fields = mapping.text or (("text",) if "text" in fields else ("title", "body"))
    present = [found for spec in text_fields if (found := _first_text(fields, spec)) is not None]
    if not present:
        raise RecordError(f"missing text field '{'+'.join(text_fields)}'")
    parts = []
    for name, value in present:
        if not isinstance(value, str):
            raise RecordError(f"text field '{name}' is {type(value).__name__}, not a string")
        parts.append(value.strip() if len(present) > 1 else value)
    used.update(name for spec in text_fields for name in spec.split("|"))
    if timestamp_ms is None:
        ts_name, timestamp = _pick(fields, mapping.timestamp, "timestamp")
        if ts_name is None:
            wanted = mapping.timestamp or "/".join(_CANDIDATES["timestamp"])
            raise RecordError(f"missing timestamp field '{wanted}'")
        used.add(ts_name)
        timestamp_ms = parse_timestamp_ms(timestamp, mapping.timestamp_unit_ms)
    stream_name, stream = _pick(fields, mapping.stream, "stream")
    if stream_name is not None:
        used.add(stream_name)
    if stream is not None and (not isinstance(stream, str | int) or isinstance(stream, bool)):
        raise RecordError(f"stream must be a string or an integer, got {type(stream).__name__}")
    if stream is None or str(stream).strip() == "":
        stream = mapping.default_stream
    labels_name, labels = _pick(fields, mapping.labels, "labels")
    if labels_name is not None:
        used.add(labels_name)
    document = {
        "id": str(doc_id),
        "text": "\n\n".join(p for p in parts if p) if len(parts) > 1 else parts[0],
        "timestamp": timestamp_ms,
        "stream": str(stream),
        "labels": parse_labels(labels),
        "meta": _meta(_unused(fields, used)),
    }
    _check_deliverable(document, max_text_bytes, limit)
    return document


def _meta(unused: dict[str, Any]) -> dict[str, Any]:
    """The document's ``meta``: the record's unused fields, with its own ``meta`` object (a
    record read back from a docs topic, or written by ``Document.to_json``) merged in, its keys
    winning; it was nested one level deeper at every replay of a dump (``{"meta": {"meta":
    ...}}``). A ``meta`` field that is no object stays as it is, under ``meta``; ``null`` goes."""
    own = unused.get("meta")
    if own is not None and not isinstance(own, dict):
        return unused
    rest = {k: v for k, v in unused.items() if k != "meta"}
    return {**rest, **own} if own else rest


def _unused(fields: dict[str, Any], used: set[str]) -> dict[str, Any]:
    """``fields`` without the ``used`` ones, for the document's ``meta``; a used nested field
    (``extended_tweet.full_text``) is taken out of its objects, which are copied, and an object
    left empty goes too (the meta kept a second copy of a long nested text, and its message went
    over the size limit)."""
    meta = {k: v for k, v in fields.items() if k not in used}
    for name in used:
        parts = name.split(".")
        if name in fields or len(parts) < 2 or parts[0] not in meta:
            continue
        chain = [meta]
        for part in parts[:-1]:
            inner = chain[-1].get(part)
            if not isinstance(inner, dict):
                break
            chain[-1][part] = inner = dict(inner)  # copied: the record's objects stay whole
            chain.append(inner)
        else:
            chain[-1].pop(parts[-1], None)
        for part, outer in zip(reversed(parts[:-1]), reversed(chain[:-1]), strict=True):
            if isinstance(outer.get(part), dict) and not outer[part]:
                del outer[part]
    return meta


def _check_deliverable(document: dict[str, Any], max_text_bytes: int, limit: MessageLimit) -> None:
    """A RecordError for a document the detector would dead-letter or its destination refuse: a
    string the detector refuses (a NUL character or an unpaired surrogate, which a JSON escape
    such as ``"\\ud800"`` can make), an id or stream over its length limits or a blank stream,
    more than ``max_text_bytes`` of text, a ``meta`` without a JSON form, or a message too
    large for the detector or for ``limit`` (the producer's :data:`MAX_MESSAGE_BYTES`, or a
    smaller topic's; with its key and framing). An unpaired surrogate in ``meta`` (a tweet cut
    inside an emoji) is no reason: the detector accepts it, and the message carries it as its
    JSON escape (as ``encode`` writes it), whose bytes are the ones measured. The detector's
    size limit is its parser's to apply: it only concerns messages over ``max_text_bytes`` (a
    message that long must pass it, or no text of ``max_text_bytes`` would), so only those pay
    for the parse. A NaN or infinite number in ``meta`` (``NaN``, ``1e400`` in a JSON line)
    becomes ``null`` there, as the query commands write them: the message went out as
    ``NaN``/``Infinity``, which is not JSON for strict parsers (the detector ignores ``meta``;
    the document is kept)."""
    _check_strings(document)
    if len(document["text"].encode("utf-8")) > max_text_bytes:
        raise RecordError(f"text longer than {max_text_bytes} bytes")
    try:
        try:
            text = _strict_json(document)
        except ValueError as exc:  # a non-finite number, or a circular reference
            try:
                document["meta"] = _finite(document["meta"])
                text = _strict_json(document)
            except (ValueError, RecursionError):  # a circular reference: as it was
                raise exc from None
        payload = text.encode("utf-8", "backslashreplace")
    except (TypeError, ValueError) as exc:  # a value JSON has no form for, a circular reference
        raise RecordError(f"field 'meta' cannot be written as JSON ({exc})") from None
    except RecursionError:  # objects nested about a thousand deep
        raise RecordError("field 'meta' is nested too deeply to be written as JSON") from None
    if len(payload) > max_text_bytes:
        try:
            parse_document(payload, max_text_bytes)
        except InvalidMessageError as exc:
            raise RecordError(exc.reason) from None
    size = len(payload) + len(document["stream"].encode("utf-8")) + RECORD_OVERHEAD_BYTES
    if size > limit.max_bytes:  # the producer's: when max_text_bytes is above ~150 kB
        raise RecordError(f"message of {size} bytes exceeds {limit.name}")


def _check_strings(document: dict[str, Any]) -> None:
    """A RecordError for a document whose id, text, stream or a label is a string the detector
    refuses (:func:`~sparsewatch.consumers.messages.storable_string`), whose id or stream is over
    its length limit, or whose stream is blank: :func:`_check_deliverable`'s checks before the
    text's size."""
    try:
        for key in ("id", "text", "stream"):
            storable_string(document[key], key)
        for label in document["labels"]:
            storable_string(label, "labels")
    except InvalidMessageError as exc:
        raise RecordError(exc.reason) from None
    for key, max_chars in (("id", MAX_ID_CHARS), ("stream", MAX_STREAM_CHARS)):
        if len(document[key]) > max_chars:
            raise RecordError(f"field '{key}' is longer than {max_chars} characters")
    if not document["stream"].strip():
        raise RecordError("field 'stream' is empty")


def _strict_json(document: dict[str, Any]) -> str:
    """``document`` as compact JSON, a ValueError for a number JSON has no form for (NaN,
    infinities: Python writes ``NaN``, ``Infinity``, which strict JSON parsers refuse)."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    """``value`` with every NaN and infinite number in it, at any depth, as ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
