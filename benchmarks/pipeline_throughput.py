"""End-to-end throughput and latency of the detector worker against the per-window core alone.

Same documents, same configuration, one run:

* ``core``: the transport-free core (windowing + ``process_window``) over the documents in memory;
* ``kafka+sqlite`` (and ``kafka+postgresql`` on the server of ``--postgres-url``, by default
  ``SPARSEWATCH_TEST_DATABASE_URL``; ``--postgres-url ''``: SQLite only): the documents produced to
  a fresh topic beforehand, each stream followed by its end-of-stream marker (``--idle-close``:
  none, the last windows then close after the 0.5 s idle timeout), then the detector worker
  consumes, computes, writes and commits until the topic is drained; time from its first message to
  its last commit (joining the consumer group before the first message is reported apart as
  ``startup_s``). ``--writers process,thread`` runs each path with both write-behind writers.

Each path runs ``--repeats`` times, every run in a fresh process (fresh topic, group and database
too; a PostgreSQL one is dropped after its run); medians are reported. The overhead against the
core is reported twice: from the median runs, and paired (``paired_overhead``: each repeat's path
over the core of the same repeat, their median and a distribution-free 95% interval for it), which
a machine whose speed drifts between repeats disturbs less. Reports documents/s, the overhead
ratio against the core, window latency (close to committed) p50 and p99, and, over the run,
resident memory and window latency of the first and last fifths (the stream spans far more than an
hour of event time).

    python benchmarks/pipeline_throughput.py --documents 24000 --repeats 3 [--fixed-dictionary] \
        [--checkpoint-every 10] [--writers process,thread] [--idle-close] \
        [--postgres-url postgresql+psycopg://postgres@127.0.0.1:55432/postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import resource
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from postgres_databases import postgres_database
from sparsewatch.consumers.detector_core import build_models, process_window
from sparsewatch.consumers.detector_worker import window_spec
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer, produce
from sparsewatch.consumers.messages import EndOfStream, parse_document
from sparsewatch.consumers.windowing import Buffered, ClosedWindow, StreamWindower
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Store

from sparsewatch.config import Config, load_config
from sparsewatch.kafka_local import LocalKafka
from sparsewatch.runner import build_worker
from sparsewatch.runtime import worker_process

RESULTS = Path(__file__).resolve().parent / "results"


def _process_rss_mb(pid: int | str) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except FileNotFoundError:  # a child that just exited
        return 0.0
    return float("nan")


def _same_program(pid: str) -> bool:
    """Whether child ``pid`` runs this interpreter (the worker's writer process), not the Kafka
    broker's JVM that :func:`broker_bootstrap` starts when no broker is configured."""
    try:
        return os.readlink(f"/proc/{pid}/exe") == os.readlink("/proc/self/exe")
    except OSError:  # a child that just exited
        return False


def _rss_mb() -> float:
    """Resident memory of this process plus its live Python child processes (the writer)."""
    children = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            children += (task / "children").read_text().split()
    return _process_rss_mb("self") + sum(
        _process_rss_mb(pid) for pid in children if _same_program(pid)
    )


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


FIXED_DICTIONARY = {
    "SPARSEWATCH_DETECTOR_MAX_ATOMS": "100",
    "SPARSEWATCH_DETECTOR_NEW_ATOMS_PER_WINDOW": "0",
}
DETECTOR_ENV: dict[str, str] = {}  # set in each run's process by _child


def _config(bootstrap: str, prefix: str, db_url: str, checkpoint_every: int) -> Config:
    return load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
            "SPARSEWATCH_KAFKA_GROUP_ID": prefix,
            "SPARSEWATCH_KAFKA_PARTITIONS": "2",
            "SPARSEWATCH_DATABASE_URL": db_url,
            "SPARSEWATCH_WINDOWS_SIZE": "6h",
            # With --idle-close (no end-of-stream markers) the last window of each stream closes
            # when the drained stream has been idle this long; that wait is measured time.
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "0.5",
            "SPARSEWATCH_ANOMALY_ENABLED": "false",
            "SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY": str(checkpoint_every),
            **DETECTOR_ENV,
        }
    )


def _documents(n: int) -> list[dict]:
    half = n // 2
    docs = generate_stream(half, kind="tweet", stream="alpha", seed=21)
    docs += generate_stream(n - half, kind="tweet", stream="beta", seed=22)
    return sorted(docs, key=lambda d: d["timestamp"])


def closed_windows(docs: list[dict], config: Config, stream: str) -> list[ClosedWindow]:
    """The windows the worker would close for ``stream``, the messages parsed as it parses
    them (offsets number that stream's documents in order); the last closes at the end."""
    windower = StreamWindower(stream, window_spec(config))
    closed: list[ClosedWindow] = []
    for i, d in enumerate(x for x in docs if x["stream"] == stream):
        doc = parse_document(json.dumps(d).encode())
        closed += windower.add(Buffered(doc, 0, i), now=0.0)[0]
    return closed + windower.close_if_idle(now=1e12, wall_ms=1e15)


def run_core(docs: list[dict], checkpoint_every: int) -> dict:
    """The per-window core alone (includes message parsing, as the worker does); the
    configuration is made here, in the run's process, with its detector overrides."""
    config = _config("unused", "unused", "sqlite://", checkpoint_every)
    cpu = time.process_time()
    start = time.perf_counter()
    for stream in ("alpha", "beta"):
        models = build_models(config.detector)
        for w in closed_windows(docs, config, stream):
            process_window(models, w, config.detector)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "docs_per_s": len(docs) / seconds,
        "cpu_seconds": time.process_time() - cpu,
    }


def run_pipeline(
    bootstrap: str,
    docs: list[dict],
    db_url: str,
    checkpoint_every: int,
    series: bool = False,
    end_of_stream: bool = True,
    prefix: str | None = None,
) -> dict:
    """Produce (with ``end_of_stream``, an end-of-stream marker per stream after its documents,
    as ``sparsewatch replay --end-of-stream`` does), then time the detector worker from start to
    its last commit (with ``series``: also every RSS sample and window latency, for plots).
    A ``prefix`` (topics and consumer group) of an earlier run with the same database continues
    that run: the worker restores its checkpoints and offsets, and ``docs`` are appended."""
    prefix = prefix or f"bench-{uuid.uuid4().hex[:8]}"
    config = _config(bootstrap, prefix, db_url, checkpoint_every)
    topic = config.kafka.topic("docs")
    ensure_topics(bootstrap, {topic: 2})
    producer = make_producer(bootstrap)
    for d in docs:
        produce(producer, topic, d["stream"].encode(), json.dumps(d).encode())
        producer.poll(0)
    if end_of_stream:
        for stream in dict.fromkeys(d["stream"] for d in docs):
            produce(producer, topic, stream.encode(), EndOfStream(stream).to_json())
    producer.flush(60)
    store = Store.open(db_url)
    worker = build_worker("detector", config, store)
    rss: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            rss.append((time.perf_counter(), _rss_mb()))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    cpu = time.process_time()
    children_cpu = _children_cpu_s()
    worker.run(until_idle_s=8.0)  # returns after joining its writer process (if any)
    cpu = time.process_time() - cpu
    writer_cpu = _children_cpu_s() - children_cpu
    stop.set()
    sampler.join()
    seconds = worker.last_commit_at - worker.first_message_at
    n_stored = len(store.documents(limit=None))
    store.dispose()
    lat = np.array(worker.window_latencies)
    fifth = max(len(lat) // 5, 1)
    during = [m for t, m in rss if t <= worker.last_commit_at]
    rfifth = max(len(during) // 5, 1)
    extra = {}
    if series:
        extra = {
            "rss_samples_mb": [(t - worker.first_message_at, m) for t, m in rss],
            "window_latencies_s": lat.tolist(),
        }
    return {
        **extra,
        "seconds": seconds,
        "docs_per_s": len(docs) / seconds,
        "cpu_seconds": cpu + writer_cpu,
        "writer_process_cpu_seconds": writer_cpu,
        "startup_s": worker.first_message_at - start,
        "documents_stored": n_stored,
        "windows": int(lat.size),
        "latency_p50_s": float(np.median(lat)),
        "latency_p99_s": float(np.quantile(lat, 0.99)),
        "latency_first_fifth_median_s": float(np.median(lat[:fifth])),
        "latency_last_fifth_median_s": float(np.median(lat[-fifth:])),
        "rss_first_fifth_median_mb": float(np.median(during[:rfifth])),
        "rss_last_fifth_median_mb": float(np.median(during[-rfifth:])),
    }


def run_databases(
    folder: Path, postgres_url: str | None
) -> dict[str, Callable[[int], AbstractContextManager[str]]]:
    """Per kind of database, the one a run of repeat ``i`` writes to, for a ``with`` block around
    the run: a SQLite file in ``folder`` (left there), and, with ``postgres_url``, a fresh
    database on that server, dropped when the run ends (also when it fails or is interrupted)."""
    databases: dict[str, Callable[[int], AbstractContextManager[str]]] = {
        "sqlite": lambda i: contextlib.nullcontext(f"sqlite:///{folder / f'bench{i}.db'}")
    }
    if postgres_url:
        databases["postgresql"] = lambda i: postgres_database(postgres_url)
    return databases


def _child(detector_env: dict[str, str], fn: Any, *args: Any) -> dict:
    DETECTOR_ENV.update(detector_env)
    # What ``sparsewatch run`` does (BLAS threads, garbage collector), for both paths alike.
    config = Config()
    with worker_process(config.blas_threads, config.gc_threshold):
        return fn(*args)


def _isolated(detector_env: dict[str, str], fn: Any, *args: Any) -> dict:
    """``fn(*args)`` in a fresh process, as a worker starts: nothing left over from earlier runs
    (objects, Kafka clients' threads, heap growth) weighs on the next one."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_child, (detector_env, fn, *args))


@contextmanager
def broker_bootstrap(run_dir: Path) -> Iterator[str]:
    """``KAFKA_BOOTSTRAP_SERVERS`` if set, else a local broker started (and stopped) here."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if bootstrap:
        yield bootstrap
        return
    broker = LocalKafka(run_dir, port=0)
    try:
        yield broker.up()
    finally:
        broker.down()


def _median_run(runs: list[dict]) -> dict:
    """The run with the median time, plus every run's seconds."""
    ordered = sorted(runs, key=lambda r: r["seconds"])
    return {**ordered[len(ordered) // 2], "seconds_all_runs": [r["seconds"] for r in runs]}


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Distribution-free interval for the median of ``values``: the order statistics
    ``(x_(j), x_(n+1-j))`` with the largest ``j`` whose coverage ``1 - 2 P(Bin(n, 1/2) < j)`` is
    at least ``confidence`` (``j = 1``, the whole range, when none is). Returns the interval and
    its exact coverage (9 values: the 2nd and 8th, 96.1%)."""
    x = sorted(values)
    n = len(x)

    def coverage(j: int) -> float:
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(j)) / 2.0**n

    j = 1
    while j + 1 <= (n + 1) // 2 and coverage(j + 1) >= confidence:
        j += 1
    return x[j - 1], x[n - j], coverage(j)


def paired_overhead(path_runs: list[dict], core_runs: list[dict]) -> dict:
    """The path's wall time over the core's **in the same repeat** (run next to each other, so a
    machine that drifts between repeats slows both), minus one: every repeat's value, their
    median and a distribution-free 95% interval for that median."""
    ratios = [p["seconds"] / c["seconds"] - 1.0 for p, c in zip(path_runs, core_runs, strict=True)]
    low, high, coverage = median_interval(ratios)
    return {
        "per_repeat": ratios,
        "median": float(np.median(ratios)),
        "interval": [low, high],
        "interval_coverage": coverage,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=24000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--checkpoint-every", type=int, default=Config().windows.checkpoint_every)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SPARSEWATCH_TEST_DATABASE_URL"),
        help="also measure on this PostgreSQL server, a fresh database per run, dropped after it "
        "(default: $SPARSEWATCH_TEST_DATABASE_URL; '' for SQLite only)",
    )
    parser.add_argument(
        "--fixed-dictionary",
        action="store_true",
        help="a fixed 100-atom dictionary instead of the default growing one (a faster core)",
    )
    parser.add_argument(
        "--writers",
        default="process",
        help="comma-separated writer modes to compare (process, thread); each is its own path",
    )
    parser.add_argument(
        "--heap-free-limits",
        default="",
        help="comma-separated heap_free_limit_mb values to compare (-1: never trim between "
        "windows); each is its own path. Default: the configured value only",
    )
    parser.add_argument(
        "--publish-alerts",
        default="",
        help="comma-separated kafka.publish_alerts values to compare (true, false); each is its "
        "own path. Default: the configured value only",
    )
    parser.add_argument(
        "--idle-close",
        action="store_true",
        help="no end-of-stream markers: the last windows close after the 0.5 s idle timeout",
    )
    args = parser.parse_args()
    env = FIXED_DICTIONARY if args.fixed_dictionary else {}
    writers = [w.strip() for w in args.writers.split(",") if w.strip()]
    limits = [x.strip() for x in args.heap_free_limits.split(",") if x.strip()]
    alerts = [x.strip() for x in args.publish_alerts.split(",") if x.strip()]
    docs = _documents(args.documents)
    tmp = Path(tempfile.mkdtemp(prefix="sw-bench-"))
    databases = run_databases(tmp, args.postgres_url)
    paths = {
        f"kafka+{db}"
        + (f"/{writer}-writer" if len(writers) > 1 else "")
        + (f"/heap-free-limit-{limit}mb" if limit else "")
        + (f"/publish-alerts-{alert}" if alert else ""): (
            database,
            {
                **env,
                "SPARSEWATCH_WRITER": writer,
                **({"SPARSEWATCH_HEAP_FREE_LIMIT_MB": limit} if limit else {}),
                **({"SPARSEWATCH_KAFKA_PUBLISH_ALERTS": alert} if alert else {}),
            },
        )
        for db, database in databases.items()
        for writer in writers
        for limit in limits or [""]
        for alert in alerts or [""]
    }
    runs: dict[str, list[dict]] = {"core": [], **{k: [] for k in paths}}
    with broker_bootstrap(tmp / "kafka") as bootstrap:
        for i in range(args.repeats):
            # Interleaved, so drifting machine load hits every path; the core runs first in even
            # repeats and last in odd ones, so neither side of a pair always runs first.
            order = ["core", *paths] if i % 2 == 0 else [*paths, "core"]
            for key in order:
                if key == "core":
                    runs["core"].append(_isolated(env, run_core, docs, args.checkpoint_every))
                    continue
                database, path_env = paths[key]
                with database(i) as url:
                    runs[key].append(
                        _isolated(
                            path_env,
                            run_pipeline,
                            bootstrap,
                            docs,
                            url,
                            args.checkpoint_every,
                            False,
                            not args.idle_close,
                        )
                    )
    result: dict = {
        "documents": len(docs),
        "window": "6h event time (~720 docs)",
        "checkpoint_every": args.checkpoint_every,
        "blas_threads": Config().blas_threads,
        "detector": "fixed 100 atoms" if args.fixed_dictionary else "default (growing)",
        "repeats": args.repeats,
        "writers": writers,
        "heap_free_limits_mb": limits or [Config().heap_free_limit_mb],
        "publish_alerts": alerts or [Config().kafka.publish_alerts],
        "last_windows_closed_by": "idle timeout 0.5 s" if args.idle_close else "end-of-stream",
        **{key: _median_run(r) for key, r in runs.items()},
    }
    for key in paths:
        result[key]["overhead_vs_core"] = (
            result["core"]["docs_per_s"] / result[key]["docs_per_s"] - 1.0
        )
        result[key]["paired_overhead"] = paired_overhead(runs[key], runs["core"])
        result[key]["cpu_overhead_vs_core"] = (
            float(np.median([r["cpu_seconds"] for r in runs[key]]))
            / float(np.median([r["cpu_seconds"] for r in runs["core"]]))
            - 1.0
        )
    RESULTS.mkdir(exist_ok=True)
    label = "fixed" if args.fixed_dictionary else "default"
    label += f"_every{args.checkpoint_every}"
    label += "_idleclose" if args.idle_close else ""
    label += f"_{'-'.join(writers)}" if len(writers) > 1 else ""
    label += f"_heap{'_'.join(limits)}" if limits else ""
    label += f"_alerts{'-'.join(alerts)}" if alerts else ""
    out = RESULTS / f"pipeline_throughput_{label}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
