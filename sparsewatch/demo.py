"""``sparsewatch demo``: the whole product end to end on a generated stream, in a few minutes.

1. uses the configured Kafka broker when one answers, else the local KRaft broker (started if
   need be; demos running at once share it, and the last to end stops it if a demo started it);
2. creates fresh topics (``demo-<time>-<random>.docs`` / ``.scores`` / ``.alerts`` / ``.dlq``),
   read by fresh consumer groups (``demo-<time>-<random>.detector`` / ``.anomaly``, never the
   configured ``group_id``'s: on a shared broker those would rebalance a running deployment),
   and a fresh SQLite database;
3. replays a seeded synthetic tweet stream with stories emerging over time (no network, no licence)
   with the replay tool, then a few malformed messages that must land in the dead-letter topic;
4. runs the detector and anomaly workers until the stream is drained (the detector alone when
   ``anomaly.enabled`` is false);
5. prints the top alerts and emerging topics from the database and writes a PNG of novelty scores
   over time (novel-flagged documents and the birth of each new story marked).

SIGINT or SIGTERM ends it at any step by KeyboardInterrupt (the workers first stop after their
batch), stopping the broker it started; ``sparsewatch demo`` then says "aborted" (status 130).
"""

from __future__ import annotations

import fcntl
import secrets
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sparsewatch.config import Config
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.errors import SparsewatchError
from sparsewatch.kafka_local import LocalKafka, wait_for_broker
from sparsewatch.replay.producer import replay_documents
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.runner import build_worker, run_loops
from sparsewatch.runtime import sigterm_interrupts
from sparsewatch.storage.engine import sqlite_url
from sparsewatch.storage.store import Store

MALFORMED = [
    b"{not json",
    b'{"id": "x"}',
    b"\xff\xfe\x00",
    b'{"id": "y", "text": 1, "timestamp": 0}',
]


@dataclass
class DemoResult:
    """What the demo did, for printing and for its test."""

    database_url: str
    plot: Path
    topic_prefix: str
    n_documents: int
    n_malformed: int
    seconds: float


def demo_prefix() -> str:
    """The topic prefix and consumer group id of one demo: ``demo-<seconds>-<random>``. The start
    time tells demos apart; the random part keeps two demos started in the same second off each
    other's topics and groups."""
    return f"demo-{int(time.time())}-{secrets.token_hex(4)}"


@contextmanager
def demo_folder(out: Path) -> Iterator[None]:
    """Hold the demo folder ``out`` (made if need be) for the block: a second demo given the same
    folder meanwhile is a one-line SparsewatchError. It deleted the first's database to make its
    own there, and each printed results of the other's documents. The lock (on ``demo.lock``
    there) ends with the block or the process."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        fh = (out / "demo.lock").open("a")
    except OSError as exc:
        raise SparsewatchError(
            f"cannot use {out} as the demo's folder: {exc.strerror or exc}"
        ) from None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SparsewatchError(
                f"another demo is running with its database and plot in {out}: wait for it to "
                "end, or give this one a folder of its own (--out)"
            ) from None
        yield


def _answers(bootstrap: str) -> bool:
    """Whether a Kafka broker answers at ``bootstrap`` within 3 s."""
    try:
        wait_for_broker(bootstrap, timeout=3.0)
    except SparsewatchError:
        return False
    return True


@contextmanager
def _local_broker(run_dir: Path, configured: str) -> Iterator[str]:
    """The bootstrap address of the local broker of ``run_dir`` for the block, started when none
    runs (no broker answered at ``configured``). Demos share it: each holds a shared lock on
    ``demo.users`` there meanwhile, and the last one to end stops it when a demo started it (its
    pid is in ``demo.started``); one started otherwise (``sparsewatch kafka up --port 0``) is left
    running. The first demo to end stopped it under another still running (given its own
    ``--out``), which then waited for it for ever; and the broker of a demo killed outright ran
    on, reused by every later demo and stopped by none."""
    run_dir.mkdir(parents=True, exist_ok=True)
    broker = LocalKafka(run_dir, port=0)
    started = run_dir / "demo.started"
    with (run_dir / "demo.users").open("a") as users:
        fcntl.flock(users, fcntl.LOCK_SH)  # (waits while a demo ending stops the broker)
        try:
            yield _up(broker, started, configured)
        finally:
            fcntl.flock(users, fcntl.LOCK_UN)
            _stop_if_last(broker, started, users)


def _up(broker: LocalKafka, started: Path, configured: str) -> str:
    """Start ``broker`` unless it runs, noting in ``started`` that a demo started it; return its
    bootstrap address."""
    running = broker.status().running
    try:
        bootstrap = broker.up()
    except SparsewatchError as exc:  # (the user may have meant the configured broker)
        raise SparsewatchError(
            f"no Kafka broker answered at {configured} (kafka.bootstrap_servers), and the local "
            f"broker did not start: {exc}"
        ) from None
    if not running:
        started.write_text(str(broker.status().pid), encoding="ascii")
    return bootstrap


def _stop_if_last(broker: LocalKafka, started: Path, users: IO[str]) -> None:
    """Stop ``broker`` when a demo started it and no other demo uses it now (``users`` can be
    locked exclusively; of demos ending together, the last to unlock it gets it)."""
    try:
        fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another demo uses it: the last one stops it
    pid = broker.status().pid
    with suppress(OSError):
        if pid is not None and started.read_text(encoding="ascii") == str(pid):
            broker.down()
            started.unlink()


def _plot(store: Store, docs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [r for r in store.documents(limit=None) if r["novelty_score"] is not None]
    rows.sort(key=lambda r: r["event_time"])
    t = np.array([r["event_time"].timestamp() for r in rows])
    s = np.array([r["novelty_score"] for r in rows])
    novel = np.array([bool(r["novel"]) for r in rows], dtype=bool)  # (none scored: float)
    t0 = t.min() if t.size else 0.0
    fig, ax = plt.subplots(figsize=(11, 4.5))
    ax.scatter((t[~novel] - t0) / 3600, s[~novel], s=4, alpha=0.35, label="document")
    ax.scatter((t[novel] - t0) / 3600, s[novel], s=10, color="crimson", label="flagged novel")
    first_seen: dict[str, float] = {}
    from sparsewatch.consumers.messages import parse_timestamp

    for d in docs:
        for label in d.get("labels", []):
            first_seen.setdefault(label, parse_timestamp(d["timestamp"]) / 1000.0)
    births = sorted(v for v in first_seen.values() if t.size and v > t0)
    for i, b in enumerate(births):
        ax.axvline(
            (b - t0) / 3600,
            color="grey",
            lw=0.6,
            ls=":",
            label="new story appears" if i == 0 else None,
        )
    ax.set_xlabel("event time (hours since first scored document)")
    ax.set_ylabel("novelty score (l1 sparse coding)")
    ax.set_title("sparsewatch demo: novelty scores over time")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_demo(config: Config, n_documents: int = 4000, out_dir: Path | None = None) -> DemoResult:
    """Run the demo (see the module docstring) and return where its results are. ``config`` is
    changed to the demo's broker, topic prefix, consumer group and database. The folder's
    earlier database is deleted: hold :func:`demo_folder` around the run and the reading of its
    results."""
    with sigterm_interrupts():
        return _run(config, n_documents, out_dir)


def _run(config: Config, n_documents: int, out_dir: Path | None) -> DemoResult:
    """The demo's steps (:func:`run_demo`)."""
    start = time.perf_counter()
    data_dir = config.data_path()
    out = out_dir or data_dir / "demo"
    out.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        bootstrap = config.kafka.bootstrap_servers
        if not _answers(bootstrap):
            bootstrap = stack.enter_context(_local_broker(data_dir / "kafka", bootstrap))
        prefix = demo_prefix()
        config.kafka.bootstrap_servers = bootstrap
        config.kafka.client = {}  # plaintext, as the probe above and the local broker
        config.kafka.topic_prefix = prefix
        config.kafka.group_id = prefix
        db_path = out / "demo.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db_path}{suffix}").unlink(missing_ok=True)
        config.database_url = sqlite_url(db_path)
        docs = generate_stream(n_documents, kind="tweet", seed=7)
        topic = config.kafka.topic("docs")
        ensure_topics(bootstrap, {topic: config.kafka.partitions})
        # The end-of-stream marker closes the stream's last windows as soon as it is read.
        summary = replay_documents(docs, bootstrap, topic, end_of_stream=True)
        if summary.interrupted:  # Ctrl-C or SIGTERM while replaying: aborted, as at any time
            raise KeyboardInterrupt
        if summary.produced != len(docs):
            raise SparsewatchError(f"only {summary.produced} of {len(docs)} documents produced")
        producer = make_producer(bootstrap)
        for i, bad in enumerate(MALFORMED):  # poison messages: they must end in the DLQ
            producer.produce(topic, key=docs[i]["stream"].encode(), value=bad)
        producer.flush(60)
        del producer  # its connections must not outlive the broker stopped below
        n_malformed = len(MALFORMED)
        store = Store.open(config.database_url)
        _run_workers(config, store)
        plot = out / "novelty_scores.png"
        _plot(store, docs, plot)
        store.dispose()
        return DemoResult(
            config.database_url, plot, prefix, len(docs), n_malformed, time.perf_counter() - start
        )


def _run_workers(config: Config, store: Store) -> None:
    """Run the demo's workers until the stream is drained. SIGINT or SIGTERM stops them after
    their batch, as it stops ``sparsewatch run``, and then ends the demo as interrupted
    (KeyboardInterrupt): it went on to print what was stored so far as the demo's results and
    ended with status 0."""
    # Drained this long: done (no detector window waits for the idle timeout). The anomaly
    # worker's idle time counts only once the detector has stopped (run_loops).
    idle_s = {"detector": 5.0, "anomaly": 2.0}
    roles = ["detector", "anomaly"] if config.anomaly.enabled else ["detector"]
    if run_loops(
        [build_worker(role, config, store) for role in roles],
        [idle_s[role] for role in roles],
        blas_threads=config.blas_threads,
        gc_threshold=config.gc_threshold,
    ):
        raise KeyboardInterrupt
