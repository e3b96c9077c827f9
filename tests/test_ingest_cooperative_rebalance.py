"""``sparsewatch ingest``: several bridge processes of one consumer group (cooperative-sticky
assignment, static membership: consumers/kafka_client.py, consumers/ingest.py) while records
keep arriving, the group rebalancing under them, members joining, killed with SIGKILL and
restarted, and one killed for good, whose session then ends and whose partitions move to the
others. Read committed, the documents topic holds every good record exactly once, in each
stream's source order, the dead-letter topic every malformed one exactly once, and the results
database each malformed one once: transactional offsets (KIP-447) fence a member whose
partitions moved, whether the rebalance met it inside its consume() call or mid-transaction.
Against a real broker, through the CLI's own entry point (``python -m sparsewatch ingest``)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from sparsewatch.consumers.ingest import IngestRoute, transactional_id
from sparsewatch.consumers.messages import parse_document
from sparsewatch.storage.store import Store

from tests.support.ingest_kafka import (
    committed,
    create,
    dead_letter_source,
    make_route,
    read_all,
    reap_bridges,  # noqa: F401 (autouse: kills what spawn started)
    spawn,
    tweet_records,
)

PARTITIONS = 8
LANGS = ("en", "de", "fr", "es", "it", "pt", "ja", "ar")  # stream i on source partition i
RECORDS = 6_000
BACKLOG = 1_000  # waiting when the first bridge starts; the rest arrives over about 58 s,
FEED_SECONDS = 52.0  # all but the last HELD_BACK over FEED_SECONDS, those once the killed
HELD_BACK = 480  # member has left, over TAIL_SECONDS
TAIL_SECONDS = 6.0


def _wait(
    what: str | Callable[[], str],
    done: Callable[[], bool],
    alive: Callable[[], None],
    limit: float,
) -> None:
    deadline = time.monotonic() + limit
    while not done():
        alive()
        assert time.monotonic() < deadline, (
            f"timed out waiting for {what() if callable(what) else what}"
        )
        time.sleep(0.05)


class _Feeder(threading.Thread):
    """Writes ``records`` (record i to source partition i mod PARTITIONS) in chunks over about
    FEED_SECONDS, except the last HELD_BACK, which it writes over about TAIL_SECONDS once
    ``release`` is set: records still arrive after the killed member has left, however long
    the group took to get there (on a loaded machine the 45 s session could outlast the feed)."""

    def __init__(self, bootstrap: str, source: str, records: list[tuple[int, tuple]]) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.source, self.records = bootstrap, source, records
        self.release = threading.Event()
        self.errors: list[BaseException] = []
        self.written = 0  # records in the source topic (flushed), the backlog included

    def write(self, chunk: list[tuple[int, tuple]], producer: Producer) -> None:
        for i, (key, value) in chunk:
            producer.produce(self.source, key=key, value=value, partition=i % PARTITIONS)
        assert producer.flush(30) == 0
        self.written += len(chunk)

    def _paced(self, records: list[tuple[int, tuple]], seconds: float, producer: Producer) -> None:
        step = 40
        for start in range(0, len(records), step):
            self.write(records[start : start + step], producer)
            time.sleep(seconds * step / len(records))

    def run(self) -> None:
        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
            self._paced(self.records[:-HELD_BACK], FEED_SECONDS, producer)
            assert self.release.wait(180), "never released"
            self._paced(self.records[-HELD_BACK:], TAIL_SECONDS, producer)
        except BaseException as exc:  # reported by alive()
            self.errors.append(exc)


class _Bridges:
    """``sparsewatch ingest`` processes of one group, by instance number, each incarnation
    logging to a file of its own, and what the group has committed."""

    def __init__(
        self, route: IngestRoute, tmp_path: Path, feeder: _Feeder, rng: random.Random
    ) -> None:
        self.route, self.tmp_path, self.feeder, self.rng = route, tmp_path, feeder, rng
        self.procs: dict[int, subprocess.Popen] = {}
        self.logs: list[Path] = []
        self.admin = AdminClient({"bootstrap.servers": route.bootstrap})

    def start(self, instance: int) -> None:
        log = self.tmp_path / f"bridge-{instance}-{len(self.logs)}.log"
        self.logs.append(log)
        extra = ("--instance", str(instance), "--batch-size", "20", "--json")
        # (each writes its dead letters to the same database, ingest.db beside the logs)
        self.procs[instance] = spawn(self.route, log, until_idle=None, extra=extra)

    def tails(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.logs)

    def alive(self) -> None:
        for instance, proc in self.procs.items():
            assert proc.poll() is None, (instance, self.tails())
        assert not self.feeder.errors, self.feeder.errors

    def committed(self) -> int:
        return committed(
            self.route.bootstrap, self.route.group_id, self.route.source_topics[0], PARTITIONS
        )

    def progress(self, more: int = 60) -> None:
        """Wait until the group has committed ``more`` records beyond what it has now, or
        every record written so far (no more can come before the feeder writes again: it holds
        its last records back until the killed member has left, and a loaded machine may get
        there with everything else committed), then a few milliseconds (a transaction of 20
        records takes about 30 ms): often inside the next transaction of some bridge."""
        before = self.committed()
        now = {"written": 0, "committed": before}

        def done() -> bool:
            now["written"] = self.feeder.written  # (read first: the commits only trail it)
            now["committed"] = self.committed()
            return now["committed"] >= min(before + more, now["written"])

        def what() -> str:
            return (
                f"{more} more records committed than {before} (now {now}; partitions by "
                f"member: {self.members()})"
            )

        _wait(what, done, self.alive, 60)
        time.sleep(self.rng.uniform(0.0, 0.05))

    def members(self) -> dict[str, int]:
        """The group's members by static instance id: how many partitions each is assigned."""
        group = self.route.group_id
        description = self.admin.describe_consumer_groups([group])[group].result(10)
        return {
            m.group_instance_id or m.member_id: len(m.assignment.topic_partitions)
            for m in description.members
        }

    def member(self, instance: int) -> str:
        """The start of the static member id of ``instance``."""
        return transactional_id(self.route.group_id, instance) + "-"

    def wait_holding(self, *instances: int) -> None:
        """Wait until each of ``instances`` is a member with partitions assigned."""
        prefixes = [self.member(n) for n in instances]

        def check() -> bool:
            members = self.members()
            return all(any(k.startswith(i) and n for k, n in members.items()) for i in prefixes)

        _wait(f"{instances} holding partitions", check, self.alive, 60)

    def kill(self, instance: int) -> None:
        proc = self.procs.pop(instance)
        assert proc.poll() is None, self.tails()
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> list[dict]:
        """SIGTERM every bridge: each exits 0 and prints its summary."""
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        codes = {instance: proc.wait(60) for instance, proc in self.procs.items()}
        text = self.tails()
        assert set(codes.values()) == {0}, (codes, text)
        assert "Traceback" not in text, text
        summaries = [
            json.loads(line)
            for p in self.logs
            for line in p.read_text().splitlines()
            if line.startswith("{") and '"forwarded"' in line
        ]
        assert len(summaries) == len(self.procs), text
        return summaries


def _assert_exactly_once(
    route: IngestRoute, good: list[dict], bad: list[bytes], database: Path
) -> None:
    """Read committed: each good record once in the documents topic, in each stream's source
    order; each malformed one once in the dead-letter topic and in the database."""
    docs = read_all(route.bootstrap, route.docs_topic, len(good))
    ids = Counter(parse_document(m.value(), 100_000).id for m in docs)
    want = Counter(t["id_str"] for t in good)
    assert ids == want, (
        f"missing {sorted((want - ids).elements())[:20]}, "
        f"doubled {sorted((ids - want).elements())[:20]}"
    )
    for lang in LANGS:
        wanted = [t["id_str"] for t in good if t["user"]["lang"] == lang]
        got = [parse_document(m.value(), 100_000).id for m in docs if m.key() == lang.encode()]
        assert got == wanted, lang
    dead = read_all(route.bootstrap, route.dlq_topic, len(bad))
    assert Counter(m.value() for m in dead) == Counter(bad)
    coordinates = [dead_letter_source(m) for m in dead]
    assert len(set(coordinates)) == len(bad)
    store = Store.open(f"sqlite:///{database}", create=False)
    try:
        rows = store.dead_letters(limit=None)
    finally:
        store.dispose()
    assert sorted((r["topic"], r["partition"], r["offset"], r["payload"]) for r in rows) == sorted(
        (*c, m.value()) for c, m in zip(coordinates, dead, strict=True)
    )


@pytest.mark.slow
def test_bridges_joining_killed_and_leaving_forward_every_record_exactly_once(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """8 source partitions, 6,000 records (3% malformed), 1,000 waiting and the rest arriving
    over about 58 s (the last 480 only once the killed member has left), bridges of 20-record
    transactions: instance 0 starts; 1 and then 2 join (cooperative rebalances); 2 is
    SIGKILLed for good; 0 and 1 are SIGKILLed mid-stream and restarted at once; 3 joins while 2
    is still a dead member; 2's session ends (45 s) and its partitions move to the others while
    they work and records arrive. Every record is forwarded or dead-lettered exactly once."""
    route = make_route(kafka_bootstrap, topic_name)
    create(kafka_bootstrap, route.source_topics[0], PARTITIONS)
    create(kafka_bootstrap, route.docs_topic, 4)
    create(kafka_bootstrap, route.dlq_topic, 1)
    rng = random.Random(447)
    plan = [(LANGS[i % PARTITIONS], rng.random() < 0.03) for i in range(RECORDS)]
    records, good, bad = tweet_records(plan)
    assert len(bad) > 100
    numbered = list(enumerate(records))
    feeder = _Feeder(kafka_bootstrap, route.source_topics[0], numbered[BACKLOG:])
    feeder.write(numbered[:BACKLOG], Producer({"bootstrap.servers": kafka_bootstrap}))
    bridges = _Bridges(route, tmp_path, feeder, rng)

    began = time.monotonic()
    feeder.start()
    bridges.start(0)
    bridges.progress()
    bridges.start(1)  # joins: a cooperative rebalance moves partitions from 0 to 1
    bridges.wait_holding(0, 1)
    bridges.progress()
    bridges.start(2)  # joins: partitions move from 0 and 1 to 2
    bridges.wait_holding(0, 1, 2)
    bridges.progress()
    bridges.kill(2)  # for good: its partitions move to the others once its session has ended
    killed_at = time.monotonic()
    for instance in (0, 1):  # killed mid-stream, restarted at once (the same static member)
        bridges.progress()
        bridges.kill(instance)
        bridges.start(instance)
    bridges.progress()
    bridges.start(3)  # joins while instance 2 is still a (dead) member
    bridges.wait_holding(3)
    bridges.progress()
    _wait(
        "the killed member's session to end",
        lambda: not any(k.startswith(bridges.member(2)) for k in bridges.members()),
        bridges.alive,
        75 - (time.monotonic() - killed_at),
    )
    left_after = time.monotonic() - killed_at
    # (its partitions move to bridges still forwarding records as they arrive)
    assert feeder.is_alive(), "the records stopped arriving before the member left"
    feeder.release.set()
    feeder.join(FEED_SECONDS + TAIL_SECONDS + 30)
    assert not feeder.is_alive() and not feeder.errors, feeder.errors
    _wait("every record committed", lambda: bridges.committed() == len(records), bridges.alive, 60)
    summaries = bridges.stop_all()
    _assert_exactly_once(route, good, bad, tmp_path / "ingest.db")
    aborted = sum(p.read_text().count("transaction aborted") for p in bridges.logs)
    print(
        f"the killed member left after {left_after:.1f}s; test took "
        f"{time.monotonic() - began:.1f}s; transactions aborted (logged) {aborted}; "
        f"summaries {[(s['forwarded'], s['dead_lettered'], s['aborted']) for s in summaries]}"
    )
