"""An in-memory SQLite store (``sqlite://``, Python API only) shared by a worker's threads.

An in-memory database always gets the thread writer (another process cannot open it), but
SQLAlchemy's pool for it gave each thread a connection of its own, hence an empty database of its
own: the writer thread retried "no such table: windows" for 120 s, then the worker failed. The
engine now holds one connection for every thread, used by one checkout at a time
(``storage/engine.py``: ``OneAtATimePool``).
"""

from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.writer import ThreadWriter, make_writer
from sparsewatch.replay.producer import replay_documents
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from sparsewatch.runner import build_worker
from tests.support.writer_jobs import contents, destination, job_outcome, write_job

MEMORY_URLS = ["sqlite://", "sqlite:///file::memory:?uri=true"]


@pytest.mark.kafka
@pytest.mark.parametrize("url", MEMORY_URLS)
def test_the_writer_thread_commits_into_the_in_memory_store(kafka_bootstrap, url):
    """The job lands in the database the store's thread migrated and reads, at once (it waited
    out 120 s of "no such table" in a database of its own)."""
    store = Store.open(url)
    try:
        dest = destination(kafka_bootstrap)
        writer = make_writer("process", store, dest, "test")
        assert isinstance(writer, ThreadWriter)
        try:
            outcome = job_outcome(writer.submit(write_job()), 30)
        finally:
            writer.abandon_retries()  # (a job still retrying: let close return)
            writer.close()
        assert isinstance(outcome, float), outcome
        docs, windows, meta, offsets = contents(store, dest.input_topic)
        assert len(docs) == 50 and windows == [("s", 0, 50)] and meta == {"w": 0}
        assert offsets == {0: 51}
    finally:
        store.dispose()


def _write_turns(store: Store, n: int, errors: list[BaseException]) -> None:
    """``n`` transactions setting both partitions' offsets to ``i``; every odd one fails after
    its writes (rolled back)."""
    try:
        for i in range(n):
            try:
                with store.transaction() as tx:
                    tx.set_partition_offsets("g", "t", {0: i})
                    tx.set_partition_offsets("g", "t", {1: i})
                    if i % 2:
                        raise KeyError(i)
            except KeyError:
                pass
    except BaseException as exc:  # reported to the test's thread
        errors.append(exc)


@pytest.mark.parametrize("url", MEMORY_URLS)
def test_reads_never_see_another_threads_open_transaction(url):
    """Reads on one thread and write transactions on another take turns on the one connection: a
    read sees both partitions of the last committed transaction, never a half-written or a
    rolled-back one, and neither thread meets SQLite's "cannot start a transaction within a
    transaction"."""
    store = Store.open(url)
    try:
        errors: list[BaseException] = []
        writer = threading.Thread(target=_write_turns, args=(store, 400, errors))
        writer.start()
        seen = []
        while writer.is_alive():
            seen.append(store.partition_offsets("g", "t"))
        writer.join()
        assert errors == []
        assert store.partition_offsets("g", "t") == {0: 398, 1: 398}
        for offsets in seen:
            assert offsets == {} or (offsets[0] == offsets[1] and offsets[0] % 2 == 0), offsets
    finally:
        store.dispose()


def test_a_thread_using_the_connection_twice_is_refused_not_hung():
    """A second checkout by the thread holding the only connection would wait for itself."""
    store = Store.open("sqlite://")
    try:
        with store.reading(), pytest.raises(sa.exc.InvalidRequestError, match="already uses"):
            store.windows()
        assert store.windows() == []  # the connection was returned
    finally:
        store.dispose()


@pytest.mark.kafka
@pytest.mark.slow
def test_a_worker_over_an_in_memory_store_processes_a_stream(kafka_bootstrap):
    """The Python API's worker on ``sqlite://`` stores every document and its windows, which
    the same store then answers (and a second run resumes from the stored offsets)."""
    prefix = f"memory-{uuid.uuid4().hex[:8]}"
    env = {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
        "SPARSEWATCH_KAFKA_PARTITIONS": "1",
        "SPARSEWATCH_DATABASE_URL": "sqlite://",
        "SPARSEWATCH_WINDOWS_SIZE": "3h",
        "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "1",
        "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "100",
        "SPARSEWATCH_DETECTOR_MAX_ATOMS": "50",
        "SPARSEWATCH_DETECTOR_NEW_ATOMS_PER_WINDOW": "0",
        "SPARSEWATCH_ANOMALY_ENABLED": "false",
    }
    config = load_config(env=env)
    docs = generate_stream(300, kind="tweet", stream="alpha", seed=3)
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 1})
    replay_documents(docs[:200], kafka_bootstrap, topic)
    store = Store.open(config.database_url)
    try:
        worker = build_worker("detector", config, store)
        done = threading.Event()

        def run_twice() -> None:
            worker.run(until_idle_s=3.0)
            replay_documents(docs[200:], kafka_bootstrap, topic)
            worker.run(until_idle_s=3.0)
            done.set()

        runner = threading.Thread(target=run_twice, daemon=True)
        runner.start()
        runner.join(90)
        if runner.is_alive():
            worker.stop()
            runner.join(30)
        assert done.is_set()
        stored = store.documents(limit=None)
        assert sorted(d["doc_id"] for d in stored) == sorted(d["id"] for d in docs)
        # (the second run's documents are late: their window closed when the first run idled)
        (status,) = store.status()["streams"]
        assert sum(w["n_documents"] for w in store.windows(limit=None)) == 200
        assert status["late"] == 100 and status["checkpoints"]
        assert store.partition_offsets(f"{config.kafka.group_id}.detector", topic) == {0: 300}
    finally:
        store.dispose()
