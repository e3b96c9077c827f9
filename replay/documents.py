"""Documents from corpus files, with every rejected record accounted for: :func:`read_documents`
reads many files in turn (:func:`~sparsewatch.replay.readers.read_records`) and maps each record
to a document message (:func:`~sparsewatch.consumers.field_mapping.to_document`), sending every
record that could not be read or mapped to an :class:`ErrorFile` (source file, line, reason, raw
text) so nothing is silently dropped; :class:`ReadStats` counts what was read, per file, and the
range of event times, and notes how far each file was read: a replay resumed with ``--skip``
replaces only the entries of an earlier errors file that it went over (:class:`GoneOver`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sparsewatch.consumers.field_mapping import DEFAULT_MAX_TEXT_BYTES, FieldMapping, to_document
from sparsewatch.consumers.messages import RecordError, looks_like_epoch_seconds
from sparsewatch.replay.readers import (
    _RAW_CHARS,
    InputFormat,
    Rejected,
    SourceRecord,
    read_records,
)


class ErrorFile:
    """Rejected records as JSON lines ``{"source", "line", "reason", "raw"}``; counts every error.

    The lines go to a temporary file beside ``path`` that replaces ``path`` atomically when the
    file is closed, so a file already at ``path`` stays whole until then, and stays as it was when
    the ``with`` block ends with an exception (the new lines are dropped). Nothing is written
    until the first error arrives. A ``path`` that exists but is no regular file (``/dev/null``,
    a FIFO, ``/dev/stderr``) is written to directly: it was replaced by a file, or removed. After
    :meth:`keep_earlier`, the file that replaces ``path`` starts with the entries of the earlier
    one that this replay did not go over (counted in :attr:`kept`).

    Each entry is flushed as it is written, so that a failure to write it (a full disk) comes
    from its :meth:`write`: the temporary file is removed, the file at ``path`` stays as it was,
    the failure is kept in :attr:`failure`, and ``on_failure`` is called with it (without one,
    it is raised); later entries are counted, not written. A failure when closing is raised,
    after the same cleanup. It was caught as a failure to read the input being read (the rest
    of that input dropped), or raised when closing, the temporary file left behind.
    """

    def __init__(
        self, path: Path | None, on_failure: Callable[[OSError], None] | None = None
    ) -> None:
        self.path = path
        self.count = 0
        self.kept = 0
        self.failure: OSError | None = None
        self._on_failure = on_failure
        self._fh: IO[str] | None = None
        self._partial: Path | None = None
        self._gone_over: GoneOver | None = None
        self._line_zero: set[tuple[str, str]] = set()  # (source, raw) of the entries at line 0
        self.special = path is not None and path.exists() and not path.is_file()

    def write(self, rejected: Rejected) -> None:
        """Record one rejected record."""
        self.count += 1
        if self.path is None or self.failure is not None:
            return
        if rejected.line == 0:  # a file that cannot be read, an end-of-stream marker
            self._line_zero.add((rejected.source, rejected.raw))
        entry = {
            "source": rejected.source,
            "line": rejected.line,
            "reason": rejected.reason,
            "raw": rejected.raw,
        }
        try:
            fh = self._fh or self._open(self.path)
            fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
            fh.flush()
        except OSError as exc:
            self._fail(exc)
            if self._on_failure is None:
                raise
            self._on_failure(exc)

    def _open(self, path: Path) -> IO[str]:
        """The file the entries go to (:attr:`_fh`), opened for the first one."""
        if self.special:
            self._fh = path.open("a", encoding="utf-8", errors="backslashreplace")
            return self._fh
        path.parent.mkdir(parents=True, exist_ok=True)
        self._partial = _temporary(path)
        # An unpaired surrogate in ``raw`` is written as its JSON escape (``\\ud800``).
        self._fh = self._partial.open("x", encoding="utf-8", errors="backslashreplace")
        return self._fh

    def keep_earlier(self, gone_over: GoneOver) -> None:
        """When closed, keep the entries of the file at ``path`` (a regular file) that
        ``gone_over`` does not cover, ahead of this file's own: a replay resumed with ``--skip``
        lists only what it went over, and replaced the whole list of the replay it resumed
        (the rejections in the skipped part were lost). An entry at line 0 (a file that cannot
        be read, an end-of-stream marker) that this file lists again is not kept either."""
        self._gone_over = gone_over

    def close(self) -> None:
        """Flush the file and move it to ``path`` (when an error was written, or earlier entries
        are kept; when neither is, a file at ``path`` whose entries are all gone over is
        removed)."""
        if self.path is None or self.failure is not None:
            return
        try:
            self._close(self.path)
        except OSError as exc:
            self._fail(exc)
            raise

    def _close(self, path: Path) -> None:
        """:meth:`close`, its failures raised."""
        if self._fh is not None:
            if not self.special:
                os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None
        gone_over, self._gone_over = self._gone_over, None  # (closed twice: merged once)
        if self.special:
            return
        if gone_over is not None:
            self._merge(path, gone_over)
        if self._partial is None:
            return
        os.replace(self._partial, path)
        os.utime(path)  # (its time says when the replay ended: see _remove_earlier_errors)
        self._partial = None

    def _merge(self, path: Path, gone_over: GoneOver) -> None:
        """The entries of the file at ``path`` that :meth:`_kept` keeps, then this file's own,
        in a new temporary file (:attr:`_partial`); none, and the file at ``path`` removed,
        when there are neither."""
        try:
            earlier = path.open("rb")
        except FileNotFoundError:
            return
        merged = _temporary(path)
        try:
            with earlier, merged.open("xb") as out:
                for line in earlier:
                    if line.strip() and self._kept(line, gone_over):
                        out.write(line if line.endswith(b"\n") else line + b"\n")
                        self.kept += 1
                if self._partial is not None:
                    with self._partial.open("rb") as own:
                        shutil.copyfileobj(own, out)
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            merged.unlink(missing_ok=True)
            raise
        if self._partial is not None:
            self._partial.unlink()
        self._partial = merged
        if not self.kept and not self.count:
            merged.unlink()
            self._partial = None
            path.unlink(missing_ok=True)

    def _kept(self, line: bytes, gone_over: GoneOver) -> bool:
        """Whether the earlier entry ``line`` is kept: one that ``gone_over`` does not cover,
        nor this file lists again at line 0 (a line that is no entry is kept as it is)."""
        try:
            entry = json.loads(line)
            source, number, raw = entry["source"], entry["line"], entry["raw"]
        except (ValueError, TypeError, KeyError):
            return True
        if not (isinstance(source, str) and isinstance(number, int) and isinstance(raw, str)):
            return True
        if number == 0 and (source, raw) in self._line_zero:
            return False
        return not gone_over.covers(source, number)

    def _fail(self, exc: OSError) -> None:
        """``exc`` kept as the :attr:`failure`, what was written dropped."""
        self.failure = exc
        self.discard()

    def discard(self) -> None:
        """Drop what was written; a file at ``path`` stays as it was (what went to a special
        file has gone)."""
        fh, partial = self._fh, self._partial
        self._fh = self._partial = None
        if fh is not None:
            with contextlib.suppress(OSError):  # (what a full disk refused is refused again)
                fh.close()
        if partial is not None:
            partial.unlink(missing_ok=True)

    def __enter__(self) -> ErrorFile:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


def _temporary(path: Path) -> Path:
    """A new name for a temporary file beside ``path``, hidden."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")


@dataclass
class ReadStats:
    """Counts of what :func:`read_documents` has seen; per file (as it names the records'
    ``source``), the documents it yielded (``per_file``), the line of the last record it dealt
    with (``read_to``: rejected, or yielded and taken), and the files it read to their end or
    to a failure reading them (``read_whole``)."""

    read: int = 0
    rejected: int = 0
    files: int = 0
    per_file: dict[str, int] = field(default_factory=dict)
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None
    read_to: dict[str, int] = field(default_factory=dict)
    read_whole: set[str] = field(default_factory=set)

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

    def note_read(self, source: str, line: int) -> None:
        """The record at ``line`` of ``source`` was dealt with."""
        self.read_to[source] = max(line, self.read_to.get(source, 0))


class GoneOver:
    """What a replay went over, whose entries in an earlier errors file its own replace
    (:meth:`ErrorFile.keep_earlier`): the documents at positions ``first`` to ``last`` of the
    replay order on ``topic`` (entries by topic and position; 0, an end-of-stream marker, is
    none), and the records of the input files that ``stats`` says were read (entries by file and
    line: found again, or no longer wrong). A file is known by any path to it."""

    def __init__(self, topic: str, first: int, last: int, stats: ReadStats) -> None:
        self.topic = topic
        self.first = first
        self.last = last
        self.stats = stats
        self._files = {os.path.realpath(s): s for s in [*stats.read_to, *stats.read_whole]}
        self._named: dict[str, str | None] = {}  # an entry's source: the file as stats names it

    def covers(self, source: str, line: int) -> bool:
        """Whether the entry at ``line`` of ``source`` is one that this replay went over."""
        if source == self.topic:
            return self.first <= line <= self.last
        if source not in self._named:
            self._named[source] = self._files.get(os.path.realpath(source))
        name = self._named[source]
        if name is None:
            return False
        return name in self.stats.read_whole or 0 < line <= self.stats.read_to.get(name, 0)


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
    watch: Callable[[SourceRecord], None] | None = None,
) -> Iterator[dict[str, Any]]:
    """Document messages from every file in turn (input order), each a
    :class:`LocatedDocument`; rejects go to ``errors``. ``max_text_bytes`` is the detector's
    text limit (its configured ``max_text_bytes``). A record counts as read through in ``stats``
    once it is rejected, or its document taken (the next one asked for). ``watch`` is shown
    every record read before it is mapped: what the raw fields tell that a document no longer
    does (:class:`~sparsewatch.replay.early_timestamps.EarlyTimestamps`)."""
    errors = errors or ErrorFile(None)
    stats = stats if stats is not None else ReadStats()
    for path in paths:
        source = str(path)
        stats.files += 1
        stats.per_file[source] = 0
        for record in _records(path, fmt):
            stats.read += 1
            if isinstance(record, Rejected):
                stats.rejected += 1
                errors.write(record)
            else:
                if watch is not None:
                    watch(record)
                try:
                    document = to_document(record.fields, mapping, max_text_bytes)
                except RecordError as exc:
                    stats.rejected += 1
                    raw = raw_json(record.fields, _RAW_CHARS)
                    errors.write(Rejected(record.source, record.line, str(exc), raw))
                else:
                    stats.per_file[source] += 1
                    stats.note_timestamp(document["timestamp"])
                    yield LocatedDocument(document, record.source, record.line)
            stats.note_read(source, record.line)
        stats.read_whole.add(source)


def _records(path: Path, fmt: InputFormat | None) -> Iterator[SourceRecord | Rejected]:
    """The records of ``path`` (:func:`read_records`); a failure to read it ends them with one
    that rejects the file (line 0). Only the reading is covered: a failure to write the errors
    file was taken for one, and the rest of the input dropped."""
    try:
        yield from read_records(path, fmt)
    except OSError as exc:
        yield Rejected(str(path), 0, f"cannot read file: {exc.strerror or exc}")


def raw_json(fields: Any, limit: int) -> str:
    """``fields`` as JSON for an error report, cut to ``limit`` characters (anything JSON has no
    form for as its text; objects nested too deeply to write, which were refused for that, as a
    note)."""
    try:
        return json.dumps(fields, ensure_ascii=False, default=str)[:limit]
    except RecursionError:
        return "<nested too deeply to show>"
