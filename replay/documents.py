"""Documents from corpus files, with every rejected record accounted for: :func:`read_documents`
reads many files in turn (:func:`~sparsewatch.replay.readers.read_records`) and maps each record
to a document message (:func:`~sparsewatch.consumers.field_mapping.to_document`), sending every
record that could not be read or mapped to an :class:`ErrorFile` (source file, line, reason, raw
text) so nothing is silently dropped; :class:`ReadStats` counts what was read, per file, and the
range of event times.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sparsewatch.consumers.field_mapping import DEFAULT_MAX_TEXT_BYTES, FieldMapping, to_document
from sparsewatch.consumers.messages import RecordError, looks_like_epoch_seconds
from sparsewatch.replay.readers import _RAW_CHARS, InputFormat, Rejected, read_records


class ErrorFile:
    """Rejected records as JSON lines ``{"source", "line", "reason", "raw"}``; counts every error.

    The lines go to a temporary file beside ``path`` that replaces ``path`` atomically when the
    file is closed, so a file already at ``path`` stays whole until then, and stays as it was when
    the ``with`` block ends with an exception (the new lines are dropped). Nothing is written
    until the first error arrives. A ``path`` that exists but is no regular file (``/dev/null``,
    a FIFO, ``/dev/stderr``) is written to directly: it was replaced by a file, or removed.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.count = 0
        self._fh: IO[str] | None = None
        self._partial: Path | None = None
        self.special = path is not None and path.exists() and not path.is_file()

    def write(self, rejected: Rejected) -> None:
        """Record one rejected record."""
        self.count += 1
        if self.path is None:
            return
        if self._fh is None and self.special:
            self._fh = self.path.open("a", encoding="utf-8", errors="backslashreplace")
        elif self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._partial = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:12]}.tmp")
            # An unpaired surrogate in ``raw`` is written as its JSON escape (``\\ud800``).
            self._fh = self._partial.open("x", encoding="utf-8", errors="backslashreplace")
        entry = {
            "source": rejected.source,
            "line": rejected.line,
            "reason": rejected.reason,
            "raw": rejected.raw,
        }
        self._fh.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def close(self) -> None:
        """Flush the file and move it to ``path`` (when an error was written)."""
        if self.special and self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._fh is None or self._partial is None or self.path is None:
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None
        os.replace(self._partial, self.path)
        os.utime(self.path)  # (its time says when the replay ended: see _remove_earlier_errors)
        self._partial = None

    def discard(self) -> None:
        """Drop what was written; a file at ``path`` stays as it was (what went to a special
        file has gone)."""
        if self.special:
            self.close()
        if self._fh is None or self._partial is None:
            return
        self._fh.close()
        self._fh = None
        self._partial.unlink(missing_ok=True)
        self._partial = None

    def __enter__(self) -> ErrorFile:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


@dataclass
class ReadStats:
    """Counts of what :func:`read_documents` has seen."""

    read: int = 0
    rejected: int = 0
    files: int = 0
    per_file: dict[str, int] = field(default_factory=dict)
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None

    def note_timestamp(self, ms: int) -> None:
        """Widen the range of timestamps read to ``ms``."""
        lo, hi = self.min_timestamp_ms, self.max_timestamp_ms
        self.min_timestamp_ms = ms if lo is None else min(lo, ms)
        self.max_timestamp_ms = ms if hi is None else max(hi, ms)

    def looks_like_seconds(self) -> bool:
        """Whether every timestamp read, as epoch milliseconds, falls in 1970-01-12..1973-03-03:
        the range of epoch *seconds* from 2001 to 5138 (a corpus of epoch seconds read as ms)."""
        lo, hi = self.min_timestamp_ms, self.max_timestamp_ms
        if lo is None or hi is None:
            return False
        return looks_like_epoch_seconds(lo) and looks_like_epoch_seconds(hi)


class LocatedDocument(dict[str, Any]):
    """A document message that knows the file (``source``) and ``line`` of its record, for a
    rejection after reading (the topic's message limit, in the producer) to name them."""

    __slots__ = ("line", "source")

    def __init__(self, document: dict[str, Any], source: str, line: int) -> None:
        super().__init__(document)
        self.source = source
        self.line = line


_CANDIDATE_FIELDS = FieldMapping()  # each field from its first present candidate name


def read_documents(
    paths: Iterable[Path],
    mapping: FieldMapping = _CANDIDATE_FIELDS,
    errors: ErrorFile | None = None,
    fmt: InputFormat | None = None,
    stats: ReadStats | None = None,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
) -> Iterator[dict[str, Any]]:
    """Document messages from every file in turn (input order), each a
    :class:`LocatedDocument`; rejects go to ``errors``. ``max_text_bytes`` is the detector's
    text limit (its configured ``max_text_bytes``)."""
    errors = errors or ErrorFile(None)
    stats = stats if stats is not None else ReadStats()
    for path in paths:
        stats.files += 1
        stats.per_file[str(path)] = 0
        try:
            records = read_records(path, fmt)
            for record in records:
                stats.read += 1
                if isinstance(record, Rejected):
                    stats.rejected += 1
                    errors.write(record)
                    continue
                try:
                    document = to_document(record.fields, mapping, max_text_bytes)
                except RecordError as exc:
                    stats.rejected += 1
                    raw = raw_json(record.fields, _RAW_CHARS)
                    errors.write(Rejected(record.source, record.line, str(exc), raw))
                    continue
                stats.per_file[str(path)] += 1
                stats.note_timestamp(document["timestamp"])
                yield LocatedDocument(document, record.source, record.line)
        except OSError as exc:
            stats.read += 1
            stats.rejected += 1
            errors.write(Rejected(str(path), 0, f"cannot read file: {exc.strerror or exc}"))


def raw_json(fields: Any, limit: int) -> str:
    """``fields`` as JSON for an error report, cut to ``limit`` characters (anything JSON has no
    form for as its text; objects nested too deeply to write, which were refused for that, as a
    note)."""
    try:
        return json.dumps(fields, ensure_ascii=False, default=str)[:limit]
    except RecursionError:
        return "<nested too deeply to show>"
