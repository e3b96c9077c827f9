"""How the query commands print rows: strict JSON, CSV, or a rich table for people.

JSON is an array of objects with sorted keys, ISO-8601 UTC times and ``null`` for an infinite or
NaN number (which JSON cannot hold); CSV writes an empty cell where JSON writes ``null`` (no
value, and an infinite or NaN number alike: CSV wrote ``inf``); CSV and JSON carry text as stored
(escape sequences included); a table cell is data, never Rich markup.

JSON and CSV are written as the rows arrive (:func:`emit`: an export of a million documents held
them all, and its whole text, in memory); a table is built whole, as it needs every row for its
column widths and its count.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

# A table view's column: (header, row key, formatter of that key's value); the key WHOLE_ROW
# hands the formatter the whole row.
TableColumn = tuple[str, str, Callable[[Any], str]]
WHOLE_ROW = "*"


def cell_value(row: dict[str, Any], key: str) -> Any:
    """What a table column's formatter is given: ``row[key]``, or the row for :data:`WHOLE_ROW`."""
    return row if key == WHOLE_ROW else row[key]


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, bytes):
        return value.hex()
    return value


def json_value(value: Any) -> Any:
    """``value`` for strict JSON: :func:`_jsonable`, with ``None`` for infinite and NaN numbers
    at any depth (``json.dumps`` wrote ``Infinity`` and ``NaN``, which JSON parsers refuse)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    return _jsonable(value)


def cell(value: Any) -> str:
    """``value`` as a CSV cell: empty for ``None`` and for an infinite or NaN number (JSON's
    ``null``), JSON for a list or an object, ``repr`` for a float."""
    value = json_value(value)
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(json_value(value), ensure_ascii=False, sort_keys=True, allow_nan=False)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def json_row(row: dict[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """``row``'s ``columns`` as strict JSON values (:func:`json_value`)."""
    return {k: json_value(row[k]) for k in columns}


def csv_cells(row: dict[str, Any], columns: Sequence[str]) -> list[str]:
    """``row``'s ``columns`` as CSV cells (:func:`cell`)."""
    return [cell(row[k]) for k in columns]


def csv_lines(lines: Iterable[Sequence[str]]) -> str:
    """CSV text of ``lines`` of cells, one record a line (no newline after the last)
    (:func:`csv_records`)."""
    return "\n".join(csv_records(lines))


def csv_records(lines: Iterable[Sequence[str]]) -> Iterator[str]:
    """Each of ``lines`` of cells as a CSV record, without a line terminator, as it comes.

    A cell holding a line break of either kind (a newline or a bare carriage return) is quoted:
    the csv module quotes only the characters of its line terminator, so with a newline
    terminator a carriage return went out bare and readers split the record there. Each record
    is written with CRLF, which makes the module quote both, and that terminator cut off.
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    for cells in lines:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(cells)
        yield buffer.getvalue().removesuffix("\r\n")


def json_text(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> Iterator[str]:
    """The text of ``json.dumps([json_row(row, columns) for row in rows], indent=2,
    sort_keys=True, ensure_ascii=False, allow_nan=False)``, in pieces, one row at a time: an
    element is its own ``json.dumps`` with each line indented a level (a string in JSON holds
    no line break: its lines are the structure's)."""
    separator = "[\n  "
    for row in rows:
        data = json_row(row, columns)
        text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
        yield separator + text.replace("\n", "\n  ")
        separator = ",\n  "
    yield "[]" if separator == "[\n  " else "\n]"


def csv_text(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> Iterator[str]:
    """The text of ``csv_lines([columns, *(csv_cells(row, columns) for row in rows)])``, in
    pieces, one row at a time."""
    yield csv_lines([columns])
    for record in csv_records(csv_cells(row, columns) for row in rows):
        yield "\n" + record


def echo_data(text: str) -> None:
    """Print ``text`` and a newline for scripts: as UTF-8 bytes whatever the locale's encoding
    (JSON is UTF-8, RFC 8259; a Latin-1 or cp1252 stdout, such as a redirected Windows console
    or ``PYTHONIOENCODING=latin-1``, failed with UnicodeEncodeError at the first character it
    lacked), and as it is: click strips what looks like an ANSI escape sequence
    (``"\\x1b[31m"`` in a document's text) from text when the output is not a terminal."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream put in place of stdout
        click.echo(text, color=True)
        return
    sys.stdout.flush()
    buffer.write(text.encode("utf-8") + b"\n")
    buffer.flush()


def echo_data_pieces(pieces: Iterable[str]) -> None:
    """Print the text of ``pieces`` and a newline as :func:`echo_data` does, each piece as it
    comes (JSON or CSV written as its rows are read: :func:`emit`), flushed at the end.

    A reader gone (``| head``: a closed pipe) ends it quietly: the pieces left are not asked
    for (a query reading them stops), stdout is pointed at /dev/null so that the interpreter's
    final flush does not report the broken pipe too (Python's documented recipe, as
    ``alerts --follow`` does), and the command ends with status 0."""
    buffer = getattr(sys.stdout, "buffer", None)
    try:
        if buffer is None:  # a text-only stream put in place of stdout
            for piece in pieces:
                click.echo(piece, nl=False, color=True)
            click.echo("", color=True)
            return
        sys.stdout.flush()
        for piece in pieces:
            buffer.write(piece.encode("utf-8"))
        buffer.write(b"\n")
        buffer.flush()
    except BrokenPipeError:
        reader_gone()


class TableConsole(Console):
    """Rich's console for tables on stdout, a closed pipe raised as ``BrokenPipeError``: Rich's
    own handling exits with status 1 (``SystemExit(1)``), where a reader gone ends a listing
    quietly with status 0 (the ``sparsewatch`` group's ``invoke``)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def reader_gone() -> None:
    """Point stdout at /dev/null after a broken pipe (:func:`echo_data_pieces`)."""
    try:
        fileno = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's stream)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fileno)
    os.close(devnull)


def encodable(text: str) -> str:
    """``text`` with each character that stdout's encoding lacks shown as ``?``: a table, for
    people, is printed in their terminal's encoding (JSON and CSV, for programs, are UTF-8 bytes
    instead: :func:`echo_data`). Under a Latin-1 or cp1252 stdout (``PYTHONIOENCODING``, a
    redirected Windows console) one "İ" made the whole table fail with UnicodeEncodeError. Done
    to each cell before its width is measured: a column stays aligned."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    return text.encode(encoding, "replace").decode(encoding)


def emit(
    rows: Iterable[dict[str, Any]],
    fmt: str,
    columns: Sequence[str],
    table_columns: Sequence[TableColumn],
    title: str,
) -> None:
    """Print ``rows`` as JSON (every column), CSV (``columns``) or a rich table (a chosen view);
    JSON and CSV as UTF-8, exactly (:func:`echo_data_pieces`).

    JSON and CSV are written row by row as ``rows`` yields them (:func:`json_text`,
    :func:`csv_text`: the same bytes as the whole text built at once), so an iterator over a
    query's cursor is never held whole; a table collects every row first (its column widths
    and its title's count need them all): it is for people, not for exports."""
    if fmt == "json":
        echo_data_pieces(json_text(rows, columns))
    elif fmt == "csv":
        echo_data_pieces(csv_text(rows, columns))
    else:
        rows = list(rows)
        table = Table(title=f"{title} ({len(rows)})", title_justify="left")
        for header, _, _ in table_columns:
            table.add_column(header, overflow="fold")
        for row in rows:
            # Text, not str: a cell is data, never Rich markup ("[/b]" in a tweet raised
            # MarkupError; "[bold]" restyled the cell); nor terminal control (a tweet's
            # "\x1b]2;...\x07" retitled the analyst's terminal, "\x1b[41m" recoloured it)
            # and in the terminal's encoding, as people read it (encodable)
            cells = (
                Text(encodable(printable(show(cell_value(row, k))))) for _, k, show in table_columns
            )
            table.add_row(*cells)
        TableConsole(width=max(Console().width, 120)).print(table)


def show_time(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def show_number(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def show_count(value: int | None) -> str:
    return "" if value is None else str(value)


def show_flag(value: bool | None) -> str:
    return "" if value is None else ("yes" if value else "")


def shorten(width: int) -> Callable[[Any], str]:
    def show(value: Any) -> str:
        text = " ".join(str(value or "").split())
        return text if len(text) <= width else text[: width - 1] + "…"

    return show


def show_terms(value: list[list[Any]]) -> str:
    return ", ".join(f"{term} ({weight:.3f})" for term, weight in value)


def printable(text: str) -> str:
    """``text`` with its control characters escaped (``\\n``, ``\\x1b``): data, shown, never obeyed
    by the terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
