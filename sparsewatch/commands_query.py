"""``sparsewatch alerts|documents|topics|snapshots``: query the results database.

Every query prints a readable table by default, or stable JSON or CSV for scripts
(:mod:`sparsewatch.query_output`); problems with the arguments or the database are one-line errors
with a non-zero exit status.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, get_args

import click
import sqlalchemy as sa
from rich.cells import cell_len

from sparsewatch.cli_types import (
    FiniteFloat,
    FiniteFloatRange,
    TopicNumber,
    not_blank,
    utf8_name,
    utf8_text,
)
from sparsewatch.config import MAX_INT64
from sparsewatch.consumers.retry import RetryAbandonedError, StopFlag, with_backoff
from sparsewatch.errors import SparsewatchError
from sparsewatch.query_options import (
    DATABASE_OPTION,
    FORMAT_OPTION,
    LIMIT_OPTION,
    STREAMS_OPTION,
    TIME,
    WINDOW,
    check_range,
    one_more,
    open_store,
    within_limit,
)
from sparsewatch.query_output import (
    WHOLE_ROW,
    TableColumn,
    cell,
    cell_value,
    csv_cells,
    csv_lines,
    echo_data,
    emit,
    encodable,
    json_row,
    json_value,
    printable,
    shorten,
    show_count,
    show_flag,
    show_number,
    show_terms,
    show_time,
)
from sparsewatch.storage.alert_follower import AlertFollower
from sparsewatch.storage.alert_queries import AlertTime
from sparsewatch.storage.schema import ALERT_KINDS
from sparsewatch.storage.serialization import arrays_to_npz

if TYPE_CHECKING:
    from sparsewatch.storage.store import Store

# The signals that end ``alerts --follow`` (after the database look in progress), and the longest
# database outage it waits out.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_FOLLOW_OUTAGE_S = 300.0

# Characters of an alert's summary its table shows, a novel document's terms included, and how
# many of those terms (JSON and CSV have them all, with their weights)
SUMMARY_WIDTH = 70
TABLE_TERMS = 4


ALERT_COLUMNS = (
    "id",
    "kind",
    "stream",
    "subject_id",
    "score",
    "window_seq",
    "event_time",
    "created_at",
    "summary",
    "terms",
    "n_documents",
    "related_ids",
)


@click.command()
@click.option("--since", type=TIME, default=None, help="From this time (ISO-8601 or 2h, 7d...).")
@click.option("--until", type=TIME, default=None, help="Before this time (ISO-8601 or relative).")
@click.option(
    "--by",
    type=click.Choice(get_args(AlertTime)),
    default="created",
    show_default=True,
    help="Which time --since/--until and the ordering use: alert creation or document event time.",
)
@click.option("--kind", "kinds", type=click.Choice(ALERT_KINDS), multiple=True, help="Repeatable.")
@STREAMS_OPTION
@click.option(
    "--min-score", type=FiniteFloat(), default=None, help="Only alerts scoring at least this."
)
@click.option(
    "--min-documents",
    type=click.IntRange(1, 2**31 - 1),
    default=None,
    help="Only alerts standing for at least N documents (a novel story's, an emerging topic's).",
)
@click.option(
    "--grep",
    "text",
    default=None,
    callback=utf8_text,
    help="Only alerts whose summary contains this (any case).",
)
@LIMIT_OPTION
@FORMAT_OPTION
@DATABASE_OPTION
@click.option(
    "--follow",
    is_flag=True,
    help="Print the newest --limit alerts oldest first, then each new alert as it is committed, "
    "until Ctrl-C (json: one object per line).",
)
@click.option(
    "--interval",
    type=FiniteFloatRange(min=0.1),
    default=None,
    help="Seconds between two looks at the database with --follow (default 2).",
)
@click.pass_context
def alerts(
    ctx: click.Context,
    since: datetime | None,
    until: datetime | None,
    by: AlertTime,
    kinds: tuple[str, ...],
    streams: tuple[str, ...],
    min_score: float | None,
    min_documents: int | None,
    text: str | None,
    limit: int,
    fmt: str,
    database_url: str | None,
    follow: bool,
    interval: float | None,
) -> None:
    """Alerts (novel documents, anomalies, emerging topics), newest first; with --follow, as
    they are committed."""
    check_range(since, until)
    view = _alert_view(by)
    if follow:
        if until is not None:
            raise click.BadParameter("--follow takes no --until", param_hint="--until")
        follower = AlertFollower(
            kinds=kinds,
            streams=streams,
            min_score=min_score,
            since=since,
            time_field=by,
            text=text,
            min_documents=min_documents,
        )
        _follow_alerts(ctx, database_url, follower, limit, fmt, view, interval or 2.0)
        return
    if interval is not None:
        raise click.BadParameter("--interval needs --follow", param_hint="--interval")
    filters = {
        "since": since,
        "until": until,
        "kinds": kinds,
        "streams": streams,
        "min_score": min_score,
        "limit": one_more(limit),
        "time_field": by,
        "text": text,
        "min_documents": min_documents,
    }
    # read as written (emit): one transaction for the whole listing, open while it is printed
    with open_store(ctx, database_url) as store, store.streamed_alerts(**filters) as rows:
        emit(_within_limit(rows, limit, "alerts"), fmt, ALERT_COLUMNS, view, "alerts")


def _within_limit(
    rows: Iterable[dict[str, Any]], limit: int, what: str
) -> Iterator[dict[str, Any]]:
    """:func:`~sparsewatch.query_options.within_limit` as the rows are read: the first ``limit``
    of ``rows`` (asked for with :func:`one_more`), then the note on stderr when there is one
    more, in its words (after the rows, not before them: those printed were read already; a
    table collects the rows first, so its note still comes before it)."""
    for n, row in enumerate(rows):
        if n == limit:
            click.echo(f"note: {limit} {what} shown, more match: raise --limit", err=True)
            return
        yield row


def _alert_view(by: AlertTime) -> list[TableColumn]:
    """The table columns of ``alerts``: (header, row key, formatter)."""
    return [
        ("created", "created_at", show_time)
        if by == "created"
        else ("event time", "event_time", show_time),
        ("kind", "kind", str),
        ("stream", "stream", str),
        ("subject", "subject_id", str),
        ("score", "score", show_number),
        ("window", "window_seq", str),
        ("docs", "n_documents", show_count),
        ("summary", WHOLE_ROW, _alert_summary),
    ]


def _alert_summary(alert: dict[str, Any]) -> str:
    """An alert's summary in its table after a novel document's first :data:`TABLE_TERMS`
    unexplained terms (``new: volcano, lava · ...``; an emerging topic's summary names its terms
    already), shortened to :data:`SUMMARY_WIDTH` characters in all, as the summary alone was."""
    if alert["kind"] != "novel_document" or not alert["terms"]:
        return shorten(SUMMARY_WIDTH)(alert["summary"])
    terms = ", ".join(str(t) for t, _ in alert["terms"][:TABLE_TERMS])
    return shorten(SUMMARY_WIDTH)(f"new: {terms} · {alert['summary']}")


def _follow_alerts(
    ctx: click.Context,
    database_url: str | None,
    follower: AlertFollower,
    backlog: int,
    fmt: str,
    view: Sequence[TableColumn],
    interval: float,
) -> None:
    """Print the backlog, then every new alert at each look, flushed at once (a pipe gets each
    alert when it is committed). A database outage of up to ``_FOLLOW_OUTAGE_S`` is waited out
    (one line on stderr per retry; a look changes nothing until it succeeds). Ctrl-C or SIGTERM
    ends it quietly with status 0, at once even during a look (:class:`_FollowStop`), and so
    does a closed pipe (``| head``)."""
    print_rows = _alert_lines(fmt, view)
    stop = _FollowStop()
    handlers = {sig: signal.signal(sig, stop.request) for sig in _STOP_SIGNALS}
    try:
        with ExitStack() as closing:
            with stop.interruptible():  # a server that does not answer holds up the connection
                store = closing.enter_context(open_store(ctx, database_url))

            def look(read: Callable[[sa.Connection], list[dict[str, Any]]]) -> None:
                def attempt() -> list[dict[str, Any]]:
                    with stop.interruptible(), follower.attempt(), store.reading() as conn:
                        return read(conn)

                what = "reading the alerts"
                print_rows(with_backoff(attempt, what, max_wait_s=_FOLLOW_OUTAGE_S, stop=stop))

            look(lambda conn: follower.start(conn, backlog))
            while not stop.wait(interval):
                look(follower.poll)
    except (RetryAbandonedError, KeyboardInterrupt):
        return  # stopped during an outage, or during a look
    except BrokenPipeError:
        # the reader is gone: point stdout at /dev/null so that the interpreter's final flush
        # does not report the broken pipe too (Python's documented recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        for sig, handler in handlers.items():
            # Once stopped, a further signal has nothing left to stop: Python's handlers back
            # then, it killed the exiting process (status -2) or interrupted it with a
            # KeyboardInterrupt ("aborted", or a traceback).
            signal.signal(sig, signal.SIG_IGN if stop.requested else handler)


class _FollowStop(StopFlag):
    """Ctrl-C or SIGTERM for ``alerts --follow``: a stop request, which between looks ends the
    wait for the next one, and during a look (:meth:`interruptible`) also interrupts it with
    KeyboardInterrupt. A look may wait without end (PostgreSQL has no lock timeout, so a read
    behind an ``ACCESS EXCLUSIVE`` lock waits for as long as the lock is held; a server that no
    longer answers): a stop that waited for the look to end did not end the tail at all, even
    after three Ctrl-C. KeyboardInterrupt, not an exception of its own, because psycopg answers
    it by cancelling the query in the server (at most 5 s for the cancel, 5 s for the query to
    end) instead of leaving it waiting there for the lock; SQLAlchemy then discards the
    connection quietly.

    Another signal while that interruption is under way (a second Ctrl-C while the query is
    cancelled) ends the process at once, with one line on stderr (:data:`STOPPED_AGAIN`) and
    status 0, as the first one would have: nothing is written, and what was printed was flushed
    with its look. A second KeyboardInterrupt raised there instead landed wherever the
    interruption had got to: in psycopg's cancel, which abandons it with a warning, or in
    SQLAlchemy's pool as it discarded the connection, which logged "Exception terminating
    connection" with both tracebacks, or left the connection half-discarded (then "error:
    ProgrammingError: can't change 'autocommit' now", status 1)."""

    def __init__(self) -> None:
        super().__init__()
        self._looking = False

    def request(self, *_: object) -> None:
        """Signal-handler signature: ``signal.signal(signum, stop.request)``."""
        again = self.requested
        super().request()
        if self._looking:
            if again:  # a look interrupted already, its query being cancelled
                _stop_at_once()
            raise KeyboardInterrupt

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """A block (a look, opening the database) that a stop request interrupts, one requested
        just before it included (checked once the handler would raise: no signal is missed)."""
        self._looking = True
        try:
            if self.requested:
                raise KeyboardInterrupt
            yield
        finally:
            self._looking = False


STOPPED_AGAIN = (
    "stopped at once on a second signal, without waiting for the database to cancel the query "
    "in progress"
)


def _stop_at_once() -> NoReturn:
    """End the process now (from a signal handler): :data:`STOPPED_AGAIN` on stderr, status 0.
    Written to the descriptor, not through ``sys.stderr``, whose buffer the interrupted code may
    be writing to (a reentrant call is an error)."""
    with suppress(OSError):  # (stderr closed: the status says it)
        os.write(sys.stderr.fileno(), f"{STOPPED_AGAIN}\n".encode())
    os._exit(0)


def _alert_lines(
    fmt: str, view: Sequence[TableColumn]
) -> Callable[[Sequence[dict[str, Any]]], None]:
    """A printer of alerts one line each: JSON Lines, CSV (its header at the first call), or
    aligned columns of the table view (header likewise) with control characters shown as
    U+FFFD."""
    widths = [19, 14, 12, 12, 8, 8, 4, 0]
    headers = {
        "csv": csv_lines([ALERT_COLUMNS]),
        "table": _columns([h for h, _, _ in view], widths),
    }
    pending = [headers[fmt]] if fmt in headers else []  # printed with the first rows

    # JSON and CSV for scripts as UTF-8 bytes whatever the locale's encoding (echo_data)
    echo = click.echo if fmt == "table" else echo_data

    def print_rows(rows: Sequence[dict[str, Any]]) -> None:
        while pending:
            echo(pending.pop())
        for row in rows:
            if fmt == "json":
                data = json_row(row, ALERT_COLUMNS)
                line = json.dumps(data, sort_keys=True, ensure_ascii=False, allow_nan=False)
            elif fmt == "csv":
                line = csv_lines([csv_cells(row, ALERT_COLUMNS)])
            else:
                line = _columns([show(cell_value(row, k)) for _, k, show in view], widths)
            echo(line)
        sys.stdout.flush()

    return print_rows


def _columns(cells: Sequence[str], widths: Sequence[int]) -> str:
    """``cells`` padded to ``widths`` terminal cells (0: as it is; a wide character such as a CJK
    one takes two), control characters shown as U+FFFD, characters stdout cannot encode as ``?``
    (:func:`encodable`)."""
    shown = [encodable("".join(c if c.isprintable() else "\ufffd" for c in cell)) for cell in cells]
    padded = (c + " " * max(w - cell_len(c), 0) for c, w in zip(shown, widths, strict=True))
    return "  ".join(padded).rstrip()


DOCUMENT_COLUMNS = (
    "stream",
    "doc_id",
    "event_time",
    "window_seq",
    "novelty_score",
    "reconstruction_error",
    "novel",
    "late",
    "dominant_topic",
    "emerging_topic",
    "top_atoms",
    "anomaly_score",
    "anomaly",
    "labels",
    "text",
)


@click.command()
@STREAMS_OPTION
@click.option("--window", "window_seq", type=WINDOW, default=None, help="Only this window number.")
@click.option("--novel", "novel_only", is_flag=True, help="Only documents flagged novel.")
@click.option("--anomalies", "anomalies_only", is_flag=True, help="Only anomalous documents.")
@click.option("--since", type=TIME, default=None, help="Event time from (ISO-8601 or relative).")
@click.option("--until", type=TIME, default=None, help="Event time before.")
@click.option("--min-score", type=FiniteFloat(), default=None, help="Novelty score at least this.")
@click.option(
    "--topic",
    type=TopicNumber(),
    default=None,
    help="Only documents of this topic (dominant, or the emerging topic of an alert topic-ID; "
    "ID or topic-ID).",
)
@click.option(
    "--grep",
    "text",
    default=None,
    callback=utf8_text,
    help="Only documents containing this (any case).",
)
@click.option(
    "--story",
    default=None,
    callback=utf8_name,
    help="Only the documents of the novel story whose alert names this document (its subject).",
)
@LIMIT_OPTION
@FORMAT_OPTION
@DATABASE_OPTION
@click.pass_context
def documents(
    ctx: click.Context,
    streams: tuple[str, ...],
    window_seq: int | None,
    novel_only: bool,
    anomalies_only: bool,
    since: datetime | None,
    until: datetime | None,
    min_score: float | None,
    topic: int | None,
    text: str | None,
    story: str | None,
    limit: int,
    fmt: str,
    database_url: str | None,
) -> None:
    """Scored documents in event-time order (by window, topic, story, novel only, anomalies
    only, ...)."""
    check_range(since, until)
    with open_store(ctx, database_url) as store:
        ids = None
        if story is not None:
            stream, ids = _story(store, story, streams)
            streams = (stream,)
        filters = {
            "ids": ids,
            "streams": streams,
            "window_seq": window_seq,
            "novel_only": novel_only,
            "anomalies_only": anomalies_only,
            "since": since,
            "until": until,
            "min_score": min_score,
            "limit": one_more(limit),
            "topic": topic,
            "text": text,
        }
        view: list[TableColumn] = [
            ("event time", "event_time", show_time),
            ("stream", "stream", str),
            ("id", "doc_id", str),
            ("window", "window_seq", cell),
            ("novelty", "novelty_score", show_number),
            ("novel", "novel", show_flag),
            ("late", "late", show_flag),
            ("anomaly", "anomaly_score", show_number),
            ("text", "text", shorten(60)),
        ]
        # read as written (emit): one transaction for the whole listing, open while it is printed
        with store.streamed_documents(**filters) as rows:
            emit(_within_limit(rows, limit, "documents"), fmt, DOCUMENT_COLUMNS, view, "documents")


def _story(store: Store, subject: str, streams: Sequence[str]) -> tuple[str, list[str]]:
    """The stream and document ids of the novel story led by ``subject`` (its alert's subject
    and ``related_ids``); a note on stderr when the alert lists fewer than the story has."""
    found = store.story_alerts(subject, streams)
    if not found:
        where = f" in stream {', '.join(map(repr, streams))}" if streams else ""
        raise SparsewatchError(f"no novel_document alert names document {subject!r}{where}")
    if len(found) > 1:
        names = ", ".join(repr(a["stream"]) for a in found)
        raise SparsewatchError(
            f"document {subject!r} leads a story in several streams ({names}): give --stream"
        )
    (alert,) = found
    ids = [subject, *(alert["related_ids"] or ())]
    if (alert["n_documents"] or 1) > len(ids):
        click.echo(
            f"note: the alert lists {len(ids)} of its story's {alert['n_documents']} documents",
            err=True,
        )
    return alert["stream"], ids


TOPIC_COLUMNS = ("stream", "window_seq", "topic_id", "strength", "emerging", "terms")


@click.command()
@STREAMS_OPTION
@click.option("--window", "window_seq", type=WINDOW, default=None, help="Only this window.")
@click.option("--from-window", type=WINDOW, default=None, help="Windows from this number.")
@click.option("--to-window", type=WINDOW, default=None, help="Windows up to this number.")
@click.option("--emerging", "emerging_only", is_flag=True, help="Only emerging topics.")
@click.option(
    "--terms",
    "n_terms",
    type=click.IntRange(1, MAX_INT64),
    default=8,
    show_default=True,
    help="Top terms.",
)
@LIMIT_OPTION
@FORMAT_OPTION
@DATABASE_OPTION
@click.pass_context
def topics(
    ctx: click.Context,
    streams: tuple[str, ...],
    window_seq: int | None,
    from_window: int | None,
    to_window: int | None,
    emerging_only: bool,
    n_terms: int,
    limit: int,
    fmt: str,
    database_url: str | None,
) -> None:
    """Topics per window with their top terms, newest window (by event time) and strongest
    topic first.

    Strength is the topic's share of its window: a MOR-NMF topic's of the documents' topic
    weight, an emerging topic's of the documents it dominates."""
    if window_seq is not None:
        if (from_window, to_window) != (None, None):
            raise click.BadParameter(
                "give --window or --from-window/--to-window, not both", param_hint="--window"
            )
        from_window = to_window = window_seq
    if from_window is not None and to_window is not None and from_window > to_window:
        raise click.BadParameter(
            "--from-window must not be after --to-window", param_hint="--from-window"
        )
    with open_store(ctx, database_url) as store:
        rows = store.topics(
            streams=streams,
            first_window=from_window,
            last_window=to_window,
            emerging_only=emerging_only,
            n_terms=n_terms,
            limit=one_more(limit),
        )
    rows = within_limit(rows, limit, "topics")
    view: list[TableColumn] = [
        ("stream", "stream", str),
        ("window", "window_seq", str),
        ("topic", "topic_id", str),
        ("strength", "strength", show_number),
        ("emerging", "emerging", show_flag),
        ("top terms", "terms", show_terms),
    ]
    emit(rows, fmt, TOPIC_COLUMNS, view, "topics")


SNAPSHOT_COLUMNS = (
    "stream",
    "window_seq",
    "model_kind",
    "vocabulary_version",
    "shapes",
    "size_bytes",
    "created_at",
    "meta",
)


@click.group()
def snapshots() -> None:
    """Model snapshots (the l1 novelty dictionary) stored every N windows."""


@snapshots.command("list")
@STREAMS_OPTION
@click.option(
    "--model-kind",
    "model_kinds",
    multiple=True,
    callback=utf8_name,
    help="Only this kind (repeatable).",
)
@LIMIT_OPTION
@FORMAT_OPTION
@DATABASE_OPTION
@click.pass_context
def list_snapshots(
    ctx: click.Context,
    streams: tuple[str, ...],
    model_kinds: tuple[str, ...],
    limit: int,
    fmt: str,
    database_url: str | None,
) -> None:
    """Snapshots with their array shapes and sizes, newest window (by event time) first."""
    with open_store(ctx, database_url) as store:
        rows = store.snapshots(streams=streams, model_kinds=model_kinds, limit=one_more(limit))
    rows = within_limit(rows, limit, "snapshots")

    def shapes(value: dict[str, dict[str, Any]]) -> str:
        return ", ".join(
            f"{k} {'x'.join(map(str, v['shape']))} {v['dtype']}" for k, v in value.items()
        )

    view: list[TableColumn] = [
        ("stream", "stream", str),
        ("window", "window_seq", str),
        ("kind", "model_kind", str),
        ("vocab version", "vocabulary_version", str),
        ("arrays", "shapes", shapes),
        ("bytes", "size_bytes", str),
        ("created", "created_at", show_time),
    ]
    emit(rows, fmt, SNAPSHOT_COLUMNS, view, "snapshots")


@snapshots.command("export")
@click.argument("stream", callback=utf8_text)
@click.argument("model_kind", callback=utf8_text)
@click.option("--window", "window_seq", type=WINDOW, default=None, help="Window (default: newest).")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True),
    required=True,
    callback=not_blank,  # "" named no file: "error: ValueError: PosixPath('.') has an empty name"
    help="The .npz file to write (metadata goes to the same name with .json).",
)
@DATABASE_OPTION
@click.pass_context
def export_snapshot(
    ctx: click.Context,
    stream: str,
    model_kind: str,
    window_seq: int | None,
    output: str,
    database_url: str | None,
) -> None:
    """Write one snapshot's arrays to an .npz file (np.load(allow_pickle=False)) plus .json."""
    with open_store(ctx, database_url) as store:
        snap = store.load_snapshot(stream, model_kind, window_seq)
    if snap is None:
        where = "newest" if window_seq is None else f"window {window_seq}"
        # escaped: a line break in an argument made the one-line error two lines
        kind, name = printable(model_kind), printable(stream)
        raise SparsewatchError(f"no {kind} snapshot of stream '{name}' ({where})")
    path = Path(output)
    # the metadata beside the arrays: snap.npz -> snap.json, but snap.json -> snap.json.json
    meta_path = (
        path.with_suffix(".json") if path.suffix == ".npz" else path.with_name(path.name + ".json")
    )
    meta = {
        "stream": snap.stream,
        "window_seq": snap.window_seq,
        "model_kind": snap.model_kind,
        "vocabulary_version": snap.vocabulary_version,
        "created_at": json_value(snap.created_at),
        "meta": json_value(snap.meta),
    }
    meta_text = json.dumps(meta, indent=2, sort_keys=True, allow_nan=False) + "\n"
    # not np.savez(fh, **arrays): an array named "file" or "allow_pickle" is its argument
    _write_all({path: arrays_to_npz(snap.arrays), meta_path: meta_text.encode("utf-8")})
    click.echo(f"wrote {path} ({', '.join(sorted(snap.arrays))}) and {meta_path}")


def _write_all(contents: dict[Path, bytes]) -> None:
    """Write every file of ``contents`` or none of them: each goes to a temporary file beside it,
    renamed over it once all are written. A target that exists but is not a regular file (a
    folder, a FIFO, a device) is refused before anything is written: a folder named like the
    metadata file left the .npz written and the export half done, under an error naming the .npz;
    a FIFO waited forever for a reader."""
    for target in contents:
        if target.exists() and not target.is_file():
            raise SparsewatchError(f"cannot write {target}: it exists and is not a regular file")
    temporary: dict[Path, Path] = {}
    target = next(iter(contents))
    try:
        for target, data in contents.items():
            temporary[target] = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            fd = os.open(temporary[target], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        for target, written in temporary.items():
            os.replace(written, target)
    except BaseException as exc:  # an interrupt too: no temporary file stays behind
        for written in temporary.values():
            if written.is_file():
                written.unlink()
        if isinstance(exc, OSError):
            raise SparsewatchError(f"cannot write {target}: {exc.strerror or exc}") from None
        raise
