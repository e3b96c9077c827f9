"""The local broker launcher: distinct ports, a new start when a port it picked was taken in the
meantime, and Maven's checksums enforced. Real JVMs, real Maven (against a file:// mirror of the
local repository), no mocks: the port picker is a constructor argument."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparsewatch.errors import SparsewatchError
from sparsewatch.kafka_local import (
    KAFKA_VERSION,
    SCALA_VERSION,
    START_ATTEMPTS,
    LocalKafka,
    fetch_broker_jars,
    free_ports,
)
from tests.support.kafka_launcher import kill_brokers


def _listeners(run_dir: Path) -> str:
    props = (run_dir / "server.properties").read_text(encoding="ascii").splitlines()
    return next(line for line in props if line.startswith("listeners="))


def _first_pick_holds(held: int, calls: list[list[int]]) -> Callable[[int], list[int]]:
    """A port picker whose first pick starts with ``held``; later picks are free ports. Every pick
    is appended to ``calls``."""

    def pick(count: int) -> list[int]:
        ports = free_ports(count)
        if not calls:
            ports[0] = held
        calls.append(ports)
        return ports

    return pick


def test_free_ports_are_distinct_and_free() -> None:
    """The client and controller ports came from two separate picks, which can be one port."""
    for _ in range(50):
        ports = free_ports(2)
        assert len(set(ports)) == 2
    ports = free_ports(20)
    assert len(set(ports)) == 20
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


@dataclass
class _Restarted:
    """A broker started again after its first pick of ports held a port taken meanwhile."""

    broker: LocalKafka
    bootstrap: str  # what ``up()`` answered
    picks: list[list[int]]  # its picks of ports (two)
    held: int  # the port taken meanwhile
    client: int  # its client port as given (0: picked)


@contextmanager
def _restarted_past_a_held_port(run_dir: Path, fixed_client: bool) -> Iterator[_Restarted]:
    """A broker in ``run_dir`` whose first pick of ports starts with a port bound meanwhile (its
    client port, or the controller's beside a free client port given when ``fixed_client``), up
    after a second pick, its log saying why; stopped and every JVM of its killed on the way
    out."""
    picks: list[list[int]] = []
    with socket.socket() as holder, socket.socket() as probe:
        holder.bind(("127.0.0.1", 0))
        held = holder.getsockname()[1]
        probe.bind(("127.0.0.1", 0))
        client = probe.getsockname()[1] if fixed_client else 0
        probe.close()  # free again, for the broker
        broker = LocalKafka(run_dir, port=client, pick_ports=_first_pick_holds(held, picks))
        try:
            bootstrap = broker.up(timeout=60)
            assert len(picks) == 2
            log = broker.log_file.read_text(encoding="utf-8", errors="replace")
            assert f"failed to bind to 127.0.0.1:{held}: Address already in use" in log
            yield _Restarted(broker, bootstrap, picks, held, client)
        finally:
            broker.down()
            kill_brokers(run_dir)


def test_a_picked_client_port_taken_before_the_broker_binds_it_starts_again(
    tmp_path: Path,
) -> None:
    """A port picked free can be taken before the broker binds it (a socket that binds without
    listening passes the 'in use' check): the start failed instead of picking again."""
    run_dir = tmp_path / "k"
    with _restarted_past_a_held_port(run_dir, fixed_client=False) as started:
        client, controller = started.picks[1][:2]
        assert started.bootstrap == f"127.0.0.1:{client}" != f"127.0.0.1:{started.held}"
        assert started.broker.status().running
        assert _listeners(run_dir) == (
            f"listeners=PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}"
        )


def test_a_taken_controller_port_starts_again_beside_a_fixed_client_port(tmp_path: Path) -> None:
    """The controller port is always picked: taken meanwhile, it is picked again, the client
    port given by the user is kept."""
    run_dir = tmp_path / "k"
    with _restarted_past_a_held_port(run_dir, fixed_client=True) as started:
        assert started.bootstrap == f"127.0.0.1:{started.client}"
        controller = next(p for p in started.picks[1] if p != started.client)
        assert _listeners(run_dir) == (
            f"listeners=PLAINTEXT://127.0.0.1:{started.client},CONTROLLER://127.0.0.1:{controller}"
        )


def test_picked_ports_taken_every_time_give_up_after_the_last_attempt(tmp_path: Path) -> None:
    """The retries end: after START_ATTEMPTS picks whose client port is in use, one line says so
    (no broker is started on a port that a listener holds)."""
    run_dir = tmp_path / "k"
    calls: list[int] = []
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        held = holder.getsockname()[1]

        def always_held(count: int) -> list[int]:
            calls.append(count)
            return [held, *free_ports(count - 1)]

        with pytest.raises(SparsewatchError, match=f"port {held} on 127.0.0.1 is already in use"):
            LocalKafka(run_dir, port=0, pick_ports=always_held).up(timeout=60)
    assert calls == [2] * START_ATTEMPTS
    assert not LocalKafka(run_dir).status().running


def test_a_jar_whose_checksum_does_not_match_fails_the_fetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Maven's default checksum policy only warns: a corrupted kafka-clients jar from the
    repository was copied into the cache and marked complete. The repository here is a file://
    mirror of the local Maven repository in which that one jar has a byte more than its .sha1
    says, reached through a fresh user home (MAVEN_OPTS=-Duser.home)."""
    fetch_broker_jars(tmp_path / "warm")  # the local repository holds every artifact now
    local_repo = Path.home() / ".m2" / "repository"
    rel = Path(f"org/apache/kafka/kafka-clients/{KAFKA_VERSION}/kafka-clients-{KAFKA_VERSION}.jar")
    if not (local_repo / rel).is_file() or not (local_repo / f"{rel}.sha1").is_file():
        pytest.skip(f"Maven's local repository is not {local_repo} (a custom localRepository)")
    mirror = tmp_path / "mirror"
    shutil.copytree(local_repo, mirror, copy_function=os.link)  # hard links: fast, no copies
    jar = mirror / rel
    data = jar.read_bytes()
    jar.unlink()  # the link, not the local repository's jar
    jar.write_bytes(data + b"\0")
    home = tmp_path / "home"
    (home / ".m2").mkdir(parents=True)
    (home / ".m2" / "settings.xml").write_text(
        "<settings><mirrors><mirror><id>corrupt</id><mirrorOf>*</mirrorOf>"
        f"<url>{mirror.as_uri()}</url></mirror></mirrors></settings>",
        encoding="utf-8",
    )
    monkeypatch.setenv("MAVEN_OPTS", f"{os.environ.get('MAVEN_OPTS', '')} -Duser.home={home}")
    cache = tmp_path / "cache"
    with pytest.raises(SparsewatchError, match="Checksum validation failed") as err:
        fetch_broker_jars(cache)
    assert len(str(err.value).splitlines()) == 1
    fetched = cache / f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}"
    assert not (fetched / ".complete").exists() and not (fetched / "libs").exists()


def test_a_running_broker_is_reused_only_on_the_port_asked_for(tmp_path: Path) -> None:
    """``kafka up --port P`` with the run folder's broker up on another port returned that
    broker's address and exit status 0: clients set to P could not reach it."""
    run_dir = tmp_path / "broker"
    broker = LocalKafka(run_dir, port=0)
    try:
        bootstrap = broker.up(timeout=90)
        running = int(bootstrap.rsplit(":", 1)[1])
        other = next(p for p in free_ports(2) if p != running)
        with pytest.raises(SparsewatchError, match=f"already runs on {bootstrap}, not on port"):
            LocalKafka(run_dir, port=other).up(timeout=30)
        assert LocalKafka(run_dir, port=running).up(timeout=30) == bootstrap  # the same port
        assert LocalKafka(run_dir, port=0).up(timeout=30) == bootstrap  # any port
    finally:
        broker.down()
        kill_brokers(run_dir)
