"""The write-behind writers (``consumers/writer.py``) against a real broker and real databases.

The process writer and the thread writer store the same job identically and deliver its messages;
a job's checkpoint is the models' arrays as they were when it was handed over; a failing job
commits nothing and its error reaches the caller; the writer process dies with its
parent (``kill -9``), so a dead worker's transaction can never commit behind its successor.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest
from confluent_kafka import Consumer
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.retry import StopFlag
from sparsewatch.consumers.writer import (
    DeliveryError,
    ProcessWriter,
    ResultWriter,
    ThreadWriter,
    WriteJob,
    WriterError,
    make_writer,
)
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from sparsewatch.errors import SparsewatchError
from tests.support.writer_jobs import (
    OutcomeWaiter,
    contents,
    destination,
    stored_nothing,
    write_job,
)

pytestmark = pytest.mark.kafka


def _scores(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    settings = {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}
    consumer = Consumer({**settings, "group.id": uuid.uuid4().hex})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < expected and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(100, timeout=1.0) if m.error() is None]
    consumer.close()
    return got


def test_process_and_thread_writers_store_the_same_job(kafka_bootstrap, database_url, tmp_path):
    results = []
    for kind, url in (("process", database_url), ("thread", f"sqlite:///{tmp_path / 't.db'}")):
        store = Store.open(url)
        dest = destination(kafka_bootstrap)
        writer = make_writer(kind, store, dest, "test")
        assert isinstance(writer, ProcessWriter if kind == "process" else ThreadWriter)
        try:
            before = time.perf_counter()
            committed = writer.submit(write_job()).result()
            assert before < committed < time.perf_counter()  # one monotonic clock for both
        finally:
            writer.close()
        try:
            results.append(contents(store, dest.input_topic))
        finally:
            store.dispose()
        assert len(_scores(kafka_bootstrap, dest.output_topic or "", 50)) == 50
    assert results[0] == results[1]
    docs, windows, meta, offsets = results[0]
    assert len(docs) == 50 and windows == [("s", 0, 50)] and meta == {"w": 0}
    assert offsets == {0: 51}


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_a_checkpoint_is_the_arrays_as_handed_over(kafka_bootstrap, tmp_path, kind):
    """The loop hands over its models' own arrays and moves on at once; what is stored must be
    the arrays at hand-over, however late the writer gets to the job."""
    store = Store.open(f"sqlite:///{tmp_path / 'c.db'}")
    writer = make_writer(kind, store, destination(kafka_bootstrap), "test")
    release = threading.Event()
    try:
        if isinstance(writer, ThreadWriter):  # hold the writer's thread until the model moved on
            writer._pool.submit(release.wait)
        dictionary = np.arange(12, dtype=np.float32).reshape(3, 4)
        job = WriteJob(checkpoints={"s": ({"A": dictionary}, {"w": 3})}, offsets={0: 9})
        pending = writer.submit(job)
        dictionary *= -1.0  # the next window's update, in place
        release.set()
        pending.result()
    finally:
        release.set()
        writer.close()
    try:
        checkpoint = store.load_checkpoint("g", "s")
    finally:
        store.dispose()
    assert checkpoint is not None and checkpoint.meta == {"w": 3}
    np.testing.assert_array_equal(
        checkpoint.state["A"], np.arange(12, dtype=np.float32).reshape(3, 4)
    )


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_a_failing_job_commits_nothing_and_raises(kafka_bootstrap, tmp_path, kind):
    store = Store.open(f"sqlite:///{tmp_path / 'f.db'}")
    dest = destination(kafka_bootstrap)
    writer = make_writer(kind, store, dest, "test")
    try:
        with pytest.raises(WriterError, match="has no event_time"):
            writer.submit(write_job(bad_row=True)).result()
        with pytest.raises(WriterError, match="not a result write"):
            writer.submit(WriteJob(calls=[("dispose", ())])).result()
        writer.submit(write_job(n=5)).result()  # the writer goes on after a failed job
    finally:
        writer.close()
    try:
        docs, windows, _, _ = contents(store, dest.input_topic)
    finally:
        store.dispose()
    assert [d[0] for d in docs] == [f"d{i}" for i in range(5)]
    assert windows == [("s", 0, 5)]


def test_a_message_refused_at_the_hand_over_is_a_delivery_error(kafka_bootstrap, tmp_path):
    """A message the producer refuses when it is handed over (librdkafka knew the refusal
    already: here one larger than its ``message.max.bytes``; in CI a topic whose write an ACL
    denies, once a first delivery report had said so) fails the job as a refused delivery does,
    in the same words, and commits nothing; it raised the producer's own exception before."""
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    dest = destination(kafka_bootstrap)
    producer = make_producer(kafka_bootstrap, **{"message.max.bytes": 4096})
    writer = ResultWriter(store, producer, dest, StopFlag())
    job = write_job(n=5)
    job.messages[0][2] = ("s:d2", b"x" * 8192)
    try:
        with pytest.raises(DeliveryError) as refused:
            writer.write(job)
        assert str(refused.value) == (
            f"1 messages could not be delivered, the first to {dest.output_topic}: "
            "Broker: Message size too large"
        )
        assert stored_nothing(f"sqlite:///{tmp_path / 'r.db'}")
        assert store.partition_offsets("g", dest.input_topic) == {}
        writer.write(write_job(n=5))  # the writer goes on after a refused job
    finally:
        writer.close()
        store.dispose()
    assert len(_scores(kafka_bootstrap, dest.output_topic or "", 9)) == 9  # 4 + 5 delivered


CHILD = """
import sys, time
from sparsewatch.consumers.writer import Destination, ProcessWriter
writer = ProcessWriter(sys.argv[1], Destination(sys.argv[2], "g", "d", None, "q"), "orphan")
print(writer._process.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            return not any(line.startswith("State:\tZ") for line in fh)
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_writer_process_dies_with_its_worker(kafka_bootstrap, tmp_path):
    url = f"sqlite:///{tmp_path / 'o.db'}"
    Store.open(url).dispose()  # the schema exists
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, kafka_bootstrap], stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        assert _alive(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        parent.kill()


def test_writer_modes_are_validated(kafka_bootstrap):
    store = Store.open("sqlite://")
    try:
        dest = destination(kafka_bootstrap)
        with pytest.raises(ValueError, match="writer must be one of"):
            make_writer("fork", store, dest, "test")
        writer = make_writer("process", store, dest, "test")  # in memory: nobody else can open it
        assert isinstance(writer, ThreadWriter)
        writer.close()
        with pytest.raises(SparsewatchError, match=r"'writer' .* must be 'process' or 'thread'"):
            load_config(env={"SPARSEWATCH_WRITER": "fork"})
    finally:
        store.dispose()


def test_writer_process_imports_no_migration_machinery(tmp_path):
    """The writer process opens its store without migrating: starting it must not import
    Alembic (about 0.2 s of CPU at every worker start), while migrating a new database does."""
    probe = (
        "import sys\n"
        "from sparsewatch.consumers.writer import serve\n"
        "from sparsewatch.storage.store import Store\n"
        f"Store.open('sqlite:///{tmp_path / 'a.db'}', upgrade=False).dispose()\n"
        "before = 'alembic' in sys.modules\n"
        f"Store.open('sqlite:///{tmp_path / 'b.db'}').dispose()\n"
        "print(before, 'alembic' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True"]


@pytest.mark.parametrize("waiting", [False, True], ids=["before-the-wait", "during-the-wait"])
@pytest.mark.parametrize("kind", ["process", "thread"])
def test_abandon_retries_ends_a_job_waiting_out_a_database_outage(
    kafka_bootstrap, postgres_database, postgres_outage, kind, waiting
):
    """SIGTERM during an outage: the job in flight retried for two minutes before the worker
    could exit; now it is abandoned at once, with nothing committed. Also where a SIGTERM
    usually finds the worker: blocked in the job's ``result`` (the process writer sent its child
    nothing then: it counted a job as in flight only until the loop began waiting for it, so the
    worker waited out the whole outage and committed)."""
    url, _ = postgres_database
    store = Store.open(url)
    writer = make_writer(kind, store, destination(kafka_bootstrap), "test")
    try:
        postgres_outage.begin()
        pending = writer.submit(write_job())
        waiter = OutcomeWaiter(pending) if waiting else None
        time.sleep(2.0)  # the job failed and waits to retry
        t0 = time.monotonic()
        writer.abandon_retries()
        outcome = (waiter or OutcomeWaiter(pending)).outcome(30)
        assert outcome is not None and time.monotonic() - t0 < 5.0
        assert isinstance(outcome, WriterError)
        assert "RetryAbandonedError: writing results abandoned" in str(outcome)
    finally:
        writer.close()
        store.dispose()
        postgres_outage.end()
    assert stored_nothing(url)
