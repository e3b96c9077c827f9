"""The CSV reader (:func:`read_csv`): a header row, then one record per row; a quoted field may
span lines, and a damaged record is rejected alone."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from sparsewatch.replay.csv_quotes import ends_in_quotes
from sparsewatch.replay.numbered_lines import numbered_lines, whole_line
from sparsewatch.replay.source_records import Rejected, SourceRecord, raw_text


def read_csv(path: Path, field_chars: int) -> Iterator[SourceRecord | Rejected]:
    """A CSV file with a header row; a quoted field may span lines.

    A line that is not UTF-8 stays in the text the csv parser reads (its stray bytes as surrogate
    escapes), so records end where they would in a clean file, and the record it belongs to is
    rejected whole; so is a record the file ends inside (an unclosed quote, or a truncated gzip).
    When the header row is rejected (also for naming a column twice), so is every record after
    it. A field over ``field_chars`` characters (the csv module's limit, process-wide, raised to
    it) rejects its record, and reading resumes after the record's closing quote (the parser
    alone resumed inside the field and read its rest as records).
    """
    if csv.field_size_limit() < field_chars:  # process-wide; only ever raised
        csv.field_size_limit(field_chars)
    source = str(path)
    record = _CsvRecord(source)
    header: list[str] | None = None
    header_rejected = ""
    for number, row, reason in _csv_rows(path, record):
        if reason:
            yield Rejected(source, number, reason, record.raw())
            if header is None and not header_rejected:
                header_rejected = f"header row (line {number}) rejected: {reason}"
        elif not any(cell.strip() for cell in row):
            continue  # a blank line
        elif header_rejected:
            yield Rejected(source, number, header_rejected, record.raw())
        elif header is None:
            header = [h.strip() for h in row]
            header_rejected = _repeated_column(header, number)
            if header_rejected:  # a record would keep one of its two values, silently
                yield Rejected(source, number, header_rejected, record.raw())
        elif len(row) != len(header):
            reason = f"{len(row)} fields where the header has {len(header)}"
            yield Rejected(source, number, reason, record.raw())
        else:
            yield SourceRecord(source, number, dict(zip(header, row, strict=True)))
    yield from record.damage
    if header is None and not header_rejected and not record.damage:
        yield Rejected(source, 1, "empty CSV file (no header row)")


def _repeated_column(header: list[str], number: int) -> str:
    """Why the header row (line ``number``) is rejected for naming a column twice; ``""`` when
    it names each column once."""
    twice = next((h for i, h in enumerate(header) if h and h in header[:i]), None)
    return "" if twice is None else f"header row (line {number}) names column '{twice}' twice"


class _CsvRecord:
    """The CSV record being parsed: its lines, where they are not UTF-8 and whether the file
    ended inside it; and where a damaged gzip stopped."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: list[tuple[int, bytes]] = []  # the lines of the record being parsed
        self.not_utf8: list[str] = []  # where those lines are not UTF-8
        self.ended = False  # the file's lines are all read
        self.damage: list[Rejected] = []  # where a damaged gzip stops

    def start(self) -> None:
        """Forget the record parsed last."""
        self.lines.clear()
        self.not_utf8.clear()

    def what_is_wrong(self, error: str) -> str:
        """What is wrong with the record just parsed (``error``: the parser's complaint), if
        anything."""
        problems = [error] if error else []
        if self.not_utf8:
            problems.append(f"not UTF-8 ({'; '.join(self.not_utf8)})")
        if self.ended:  # the parser returns a record at the end of the file only inside quotes
            problems.append("the file ends inside a quoted field (a missing closing quote?)")
        return "; ".join(problems)

    def raw(self) -> str:
        """The record just parsed as it is in the file."""
        return raw_text(b"".join(line for _, line in self.lines))


def _csv_text(path: Path, record: _CsvRecord) -> Iterator[str]:
    """The lines of ``path`` as the csv parser reads them (a line that is not UTF-8 with its
    stray bytes as surrogate escapes), each noted in ``record``."""
    for number, line, error in numbered_lines(path):
        if not isinstance(line, bytes):
            if line is None:
                record.damage.append(Rejected(record.source, number, error))
                break
            if (line := whole_line(line)) is None:
                continue
        record.lines.append((number, line))
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as exc:
            record.not_utf8.append(f"line {number}, byte {exc.start}")
            yield line.decode("utf-8", "surrogateescape")
    record.ended = True


def _skip_rest_of_record(record: _CsvRecord, text: Iterator[str]) -> None:
    """After a field over the limit (the parser dropped the rest of its line): read on in
    ``text`` while the record's last line ends inside a quoted field (:func:`ends_in_quotes`),
    to the line that closes it."""
    inside = False
    for _, line in record.lines:
        inside = ends_in_quotes(line, inside)
    while inside:
        try:
            next(text)
        except StopIteration:
            return
        inside = ends_in_quotes(record.lines[-1][1], inside=True)


def _csv_rows(path: Path, record: _CsvRecord) -> Iterator[tuple[int, list[str], str]]:
    """(line where it starts, fields, what is wrong or ``""``) of each record of ``path``, parsed
    one at a time: ``record`` describes the record last yielded until the next is asked for."""
    text = _csv_text(path, record)
    reader = csv.reader(text)
    while True:
        record.start()
        try:
            row, error = next(reader), ""
        except StopIteration:
            return
        except csv.Error as exc:
            row, error = [], f"invalid CSV: {exc}"
            if "field larger than field limit" in str(exc):
                _skip_rest_of_record(record, text)
                reader = csv.reader(text)
                if (last := record.lines[-1][0]) > record.lines[0][0]:
                    error += f" (the record, lines {record.lines[0][0]}-{last}, is skipped)"
        yield record.lines[0][0], row, record.what_is_wrong(error)
