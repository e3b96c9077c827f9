"""External sort of documents by event time: :func:`sort_by_event_time` orders documents by
(timestamp, input position) with bounded memory, spilling sorted runs of at most ``chunk_size``
documents to temporary files and merging them lazily, a bounded number of files open at once.
"""

from __future__ import annotations

import heapq
import json
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# Runs merged at once, each an open file: a process may open 256 files (macOS) or 1,024 (a common
# Linux default), and merging every run at once stopped a small --chunk-size over a large corpus
_MERGE_FAN_IN = 64


def _spill(run: list[tuple[int, int, dict[str, Any]]], folder: Path) -> Path:
    run.sort(key=lambda item: (item[0], item[1]))
    return _write_run(run, folder)


def _write_run(items: Iterable[tuple[int, int, dict[str, Any]]], folder: Path) -> Path:
    """A run file of ``items`` (sorted), in ``folder``; an unpaired surrogate (in a ``meta``) is
    written as it is (``surrogatepass``), for :func:`_read_run` to read back unchanged."""
    with tempfile.NamedTemporaryFile(
        "w", dir=folder, suffix=".jsonl", delete=False, encoding="utf-8", errors="surrogatepass"
    ) as fh:
        for ts, seq, doc in items:
            fh.write(json.dumps([ts, seq, doc], ensure_ascii=False) + "\n")
    return Path(fh.name)


def _read_run(path: Path) -> Iterator[tuple[int, int, dict[str, Any]]]:
    with path.open(encoding="utf-8", errors="surrogatepass") as fh:
        for line in fh:
            ts, seq, doc = json.loads(line)
            yield ts, seq, doc


def _merged(runs: list[Path]) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """The items of ``runs`` in (timestamp, input position) order."""
    return heapq.merge(*(_read_run(p) for p in runs), key=lambda item: (item[0], item[1]))


def _fewer_runs(runs: list[Path], folder: Path) -> list[Path]:
    """``runs`` merged, :data:`_MERGE_FAN_IN` at a time, into at most that many (each merged
    run's files removed), so that the final merge keeps that many files open."""
    while len(runs) > _MERGE_FAN_IN:
        group, runs = runs[:_MERGE_FAN_IN], runs[_MERGE_FAN_IN:]
        runs.append(_write_run(_merged(group), folder))
        for path in group:
            path.unlink()
    return runs


def sort_by_event_time(
    documents: Iterable[dict[str, Any]], chunk_size: int = 100_000, tmp_dir: Path | None = None
) -> Iterator[dict[str, Any]]:
    """``documents`` ordered by (timestamp, input position), holding at most ``chunk_size`` in
    memory: sorted runs go to temporary files and are merged with a heap, at most
    :data:`_MERGE_FAN_IN` files open at once. Timestamps must be epoch ms integers (as
    :func:`~sparsewatch.consumers.field_mapping.to_document` makes them)."""
    if chunk_size < 1:
        raise ValueError("chunk_size must be positive")
    run: list[tuple[int, int, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="sparsewatch-sort-", dir=tmp_dir) as folder:
        runs: list[Path] = []
        for seq, doc in enumerate(documents):
            run.append((int(doc["timestamp"]), seq, doc))
            if len(run) >= chunk_size:
                runs.append(_spill(run, Path(folder)))
                run = []
        if not runs:
            run.sort(key=lambda item: (item[0], item[1]))
            for _, _, doc in run:
                yield doc
            return
        if run:
            runs.append(_spill(run, Path(folder)))
            run = []
        for _, _, doc in _merged(_fewer_runs(runs, Path(folder))):
            yield doc
