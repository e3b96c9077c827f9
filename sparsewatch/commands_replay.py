"""``sparsewatch replay PATH... --topic T``: feed a historical corpus through a Kafka topic."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sparsewatch.cli_types import FiniteFloatRange, command_config, not_blank
from sparsewatch.commands_ingest import check_docs_topic
from sparsewatch.config import MAX_INT64
from sparsewatch.errors import SparsewatchError
from sparsewatch.kafka_options import (
    BOOTSTRAP_OPTION,
    CONNECT_TIMEOUT_OPTION,
    SUMMARY_JSON_OPTION,
    broker_topics,
    create_missing_topics,
    field_mapping,
    field_mapping_options,
    topic_names,
)
from sparsewatch.replay.documents import ErrorFile, GoneOver, ReadStats, read_documents
from sparsewatch.replay.early_timestamps import EarlyTimestamps
from sparsewatch.replay.producer import ReplaySummary, replay_documents
from sparsewatch.replay.readers import detect_format
from sparsewatch.runtime import sigterm_interrupts


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--topic",
    default=None,
    callback=topic_names,
    help="Topic to produce to (default: <prefix>.docs).",
)
@BOOTSTRAP_OPTION
@click.option(
    "--input-format",
    "fmt",
    type=click.Choice(["jsonl", "csv", "reuters"]),
    default=None,
    help="Input format (default: from the file name; .gz is read as gzip either way).",
)
@field_mapping_options
@click.option(
    "--rate",
    type=FiniteFloatRange(min=0, min_open=True),
    default=None,
    help="Documents per second (default: as fast as possible).",
)
@click.option(
    "--speedup",
    type=FiniteFloatRange(min=0, min_open=True),
    default=None,
    help="Replay at X times event time (the gaps between timestamps, scaled).",
)
@click.option(
    "--max-wait",
    type=FiniteFloatRange(min=0),
    default=None,
    help="With --speedup: longest single pause in seconds.",
)
@click.option(
    "--skip",
    type=click.IntRange(0, MAX_INT64),
    default=0,
    show_default=True,
    help="Skip the first N documents (in event-time order), e.g. to resume (the errors file "
    "then keeps the earlier entries that this replay does not go over).",
)
@click.option("--limit", type=click.IntRange(0, MAX_INT64), default=None, help="Produce at most N.")
@click.option("--no-sort", is_flag=True, help="Trust the input order (no event-time sort).")
@click.option(
    "--chunk-size",
    type=click.IntRange(1, MAX_INT64),
    default=100_000,
    show_default=True,
    help="Documents sorted in memory at once; larger inputs are merged from disk.",
)
@click.option(
    "--errors",
    "errors_path",
    type=click.Path(dir_okay=False),
    callback=not_blank,
    default=None,
    help="Where rejected records go (default: DATA_DIR/replay-errors.jsonl); replaced when the "
    "replay completes (updated, given --skip), removed when nothing was rejected.",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1, max=2**31 - 1),
    default=None,
    help="Create the topic with N partitions if it does not exist (default: config).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar (default: when stderr is a terminal).",
)
@CONNECT_TIMEOUT_OPTION
@click.option(
    "--end-of-stream",
    is_flag=True,
    help="After the last document, an end-of-stream marker per stream that ends by then (also "
    "one that ended in the --skip part; not one that goes on after --limit): the detector closes "
    "its last windows at once instead of after the idle timeout (only when nothing more of these "
    "streams follows).",
)
@SUMMARY_JSON_OPTION
@click.pass_context
def replay(
    ctx: click.Context,
    paths: tuple[str, ...],
    topic: str | None,
    bootstrap_servers: str | None,
    fmt: Any,
    rate: float | None,
    speedup: float | None,
    max_wait: float | None,
    skip: int,
    limit: int | None,
    no_sort: bool,
    chunk_size: int,
    errors_path: str | None,
    partitions: int | None,
    progress: bool | None,
    connect_timeout: float,
    end_of_stream: bool,
    as_json: bool,
    **mapping_options: Any,
) -> None:
    """Read JSONL, CSV or Reuters-21578 SGML files (plain or gzip) and produce their documents,
    in event-time order, to a Kafka topic keyed by stream id.

    Records that cannot be read or mapped, or that the detector would refuse (also for an event
    time more than windows.max_ahead after the time it is sent), are written, with their file
    and line, to the error file and counted; the summary says how many were read,
    produced and rejected. A replay that rejects every record fails (exit status 2).
    """
    if rate is not None and speedup is not None:
        raise click.UsageError("give --rate or --speedup, not both")
    if max_wait is not None and speedup is None:
        raise click.UsageError("--max-wait caps the pauses of --speedup: give --speedup too")
    if end_of_stream and limit is not None and no_sort:
        raise click.UsageError(
            "--end-of-stream with --limit needs the sorted replay, which knows the streams that "
            "go on after the limit: drop --no-sort"
        )
    config = command_config(ctx)
    topic = topic or config.kafka.topic("docs")
    check_docs_topic(topic, config.kafka, "--topic")
    bootstrap = config.kafka.connection(bootstrap_servers)
    errors_file = Path(errors_path) if errors_path else config.data_path() / "replay-errors.jsonl"
    inputs = [Path(p) for p in paths]
    _refuse_input_as_errors_file(errors_file, inputs)
    _refuse_unwritable_errors_file(errors_file)
    if fmt is None:
        _refuse_unknown_formats(inputs)
    mapping = field_mapping(mapping_options)
    broker_topics(bootstrap, connect_timeout)
    create_missing_topics(
        bootstrap, {topic: partitions or config.kafka.partitions}, connect_timeout
    )
    stats = ReadStats()
    started = time.time()
    console = Console(stderr=True)
    show = console.is_terminal if progress is None else progress
    resumed = ctx.get_parameter_source("skip") is not ParameterSource.DEFAULT
    errors = ErrorFile(errors_file, on_failure=_stop_replay)
    early = EarlyTimestamps(mapping)
    with sigterm_interrupts(), errors:  # SIGTERM stops as Ctrl-C
        docs = read_documents(
            inputs, mapping, errors, fmt, stats, config.max_text_bytes, watch=early
        )
        bar = Progress(
            TextColumn("replay"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.0f} docs/s"),
            TimeElapsedColumn(),
            console=console,
            disable=not show,
        )
        with bar:
            task = bar.add_task("replay", total=None, rate=0.0)

            def advance(summary: ReplaySummary) -> None:
                if summary.read % 200 and summary.read != 1:
                    return
                total = stats.read - stats.rejected - summary.rejected
                if limit is not None:
                    total = min(total, skip + limit)
                elapsed = bar.tasks[0].elapsed or 0.0
                speed = (summary.read - summary.skipped) / elapsed if elapsed else 0.0
                bar.update(task, completed=summary.read, total=total, rate=speed)

            summary = replay_documents(
                docs,
                bootstrap,
                topic,
                rate=rate,
                speedup=speedup,
                max_wait_s=max_wait,
                skip=skip,
                limit=limit,
                sort=not no_sort,
                chunk_size=chunk_size,
                errors=errors,
                progress=advance,
                end_of_stream=end_of_stream,
                max_text_bytes=config.max_text_bytes,
                max_ahead_ms=config.windows.max_ahead_ms(),
            )
            bar.update(task, completed=summary.read, total=summary.read)
        gone_over = GoneOver(topic, skip + 1, summary.resume_skip, stats) if resumed else None
        listed = _close_errors(errors, errors_file, gone_over, started)
    _report(summary, stats, topic, errors_file if listed else None, as_json)
    _timestamp_notes(mapping.timestamp_unit_ms, stats, early)
    if errors.failure is not None:
        unlisted = f"the records it rejected or did not deliver ({errors.count}) are not listed, "
        raise SparsewatchError(
            f"cannot write the errors file {errors_file}: "
            f"{errors.failure.strerror or errors.failure}; {unlisted if errors.count else ''}"
            "and an earlier file there is left as it was"
        )
    if summary.interrupted:
        ctx.exit(130)
    if summary.failed:
        raise SparsewatchError(
            f"{summary.failed} messages were not delivered ({'; '.join(summary.errors[:3])}); "
            f"they are listed in {errors_file}"
        )
    if 0 < stats.read == stats.rejected + summary.rejected:
        raise SparsewatchError(
            f"no document was produced: every record read ({stats.read}) was rejected; the "
            f"rejections are listed in {errors_file}"
        )


def _timestamp_notes(unit_ms: int, stats: ReadStats, early: EarlyTimestamps) -> None:
    """After the summary, a note on timestamps that look misread: every one of them epoch
    seconds read as milliseconds (``unit_ms`` 1), or else numbers read as moments before 1980
    (relative times: ``early``), as epoch seconds fall too."""
    if unit_ms == 1 and stats.looks_like_seconds():
        click.echo(
            "note: read as epoch milliseconds, every timestamp falls in 1970-01-12..1973-03-03; "
            "if they are epoch seconds, replay them with --timestamp-unit s",
            err=True,
        )
    elif (note := early.note()) is not None:
        click.echo(note, err=True)


def _close_errors(
    errors: ErrorFile, errors_file: Path, gone_over: GoneOver | None, started: float
) -> bool:
    """Close ``errors`` (a failure kept as its ``failure``, reported after the summary): given
    ``gone_over`` (a replay given --skip), keeping the earlier entries that it does not cover;
    else an earlier errors file removed when nothing was rejected. Whether ``errors_file``
    lists anything now."""
    if gone_over is not None:
        errors.keep_earlier(gone_over)
    with contextlib.suppress(OSError):  # (kept as errors.failure)
        errors.close()
    if errors.failure is not None:
        return False
    if gone_over is None and not errors.count and not errors.special:
        _remove_earlier_errors(errors_file, started)
    return bool(errors.count or errors.kept)


def _stop_replay(failure: OSError) -> None:
    """Stop the replay as SIGTERM or Ctrl-C does, for a ``failure`` to write the errors file
    (reported after the summary): by calling the SIGTERM handler in place, which the replay's
    producer defers while it hands a document over and counts it, or runs delivery reports (an
    exception raised there escaped its final flush: no summary, what was still queued lost),
    so that the summary and resume point stay right."""
    handler = signal.getsignal(signal.SIGTERM)
    if not callable(handler):  # (not in the main thread: no handler was set)
        raise KeyboardInterrupt from failure
    handler(signal.SIGTERM, None)


def _remove_earlier_errors(errors_file: Path, started: float) -> None:
    """Remove the errors file of a replay that ended before this one ``started`` (its errors
    would mislead), not one that another replay with the same ``data_dir`` wrote meanwhile (it
    was removed right after that replay had named it)."""
    try:
        if errors_file.stat().st_mtime < started:
            errors_file.unlink()
    except FileNotFoundError:
        return


def _refuse_input_as_errors_file(errors_file: Path, inputs: list[Path]) -> None:
    """A usage error when ``errors_file`` is one of the ``inputs`` (by any path or link to it):
    the replay would overwrite or remove its own corpus."""
    if not errors_file.exists():
        return
    for path in inputs:
        if errors_file.samefile(path):
            raise click.UsageError(
                f"the errors file {errors_file} is the input file {path}: give --errors another "
                "path"
            )


def _refuse_unwritable_errors_file(errors_file: Path) -> None:
    """A usage error when the errors file could not be written (it is a folder, its folder is a
    file, or not writable), before anything is produced: the replay used to fail at its first
    rejected record, half done, or after completing, when removing an earlier errors file."""
    if errors_file.is_dir():  # (the default path: --errors takes no folder)
        raise click.UsageError(
            f"cannot write the errors file {errors_file}: it is a folder; give --errors another "
            "path"
        )
    folder = errors_file.parent
    while not folder.exists() and folder != folder.parent:  # the folders it would make
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise click.UsageError(
            f"cannot write the errors file {errors_file}: {folder} is not a writable folder; "
            "give --errors another path"
        )


def _refuse_unknown_formats(inputs: list[Path]) -> None:
    """A usage error, before anything is read or produced, for an input whose format the name
    does not tell (the replay used to stop there after producing the files before it)."""
    for path in inputs:
        try:
            detect_format(path)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None


def _report(
    summary: ReplaySummary, stats: ReadStats, topic: str, errors: Path | None, as_json: bool
) -> None:
    """The final summary: read, produced, rejected (and where the rejects are)."""
    result = {
        "topic": topic,
        "files": stats.files,
        "read": stats.read,
        "produced": summary.produced,
        "rejected": stats.rejected + summary.rejected,
        "skipped": summary.skipped,
        "failed": summary.failed,
        "elapsed_s": round(summary.elapsed_s, 3),
        "rate": round(summary.rate, 1),
        "interrupted": summary.interrupted,
        "resume_skip": summary.resume_skip,
        "first_timestamp_ms": summary.first_timestamp_ms,
        "last_timestamp_ms": summary.last_timestamp_ms,
        "errors_file": str(errors) if errors else None,
    }
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
        return
    line = (
        f"read {result['read']}, produced {result['produced']}, rejected {result['rejected']}"
        f", skipped {result['skipped']}, failed {result['failed']} to {topic} in "
        f"{summary.elapsed_s:.1f} s ({summary.rate:.0f} docs/s)"
    )
    if summary.interrupted:
        line += f", interrupted (resume with --skip {summary.resume_skip})"
    click.echo(line)
    if errors:
        click.echo(f"rejected records: {errors}")
