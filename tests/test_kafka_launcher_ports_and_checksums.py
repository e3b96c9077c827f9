"""The local broker launcher: distinct ports, a new start when a port it picked was taken in the
meantime, and Maven's checksums enforced. Real JVMs, real Maven (against a file:// mirror of the
local repository), no mocks: the port picker is a constructor argument."""

from __future__ import annotations

import os
import shutil
import signal
import socket
from collections.abc import Callable
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
from tests.support.kafka_launcher import brokers_of


def _kill_all(run_dir: Path) -> None:
    """SIGKILL every JVM running the broker configured in ``run_dir`` (a failed test's)."""
    for pid in brokers_of(run_dir):
        os.kill(pid, signal.SIGKILL)


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


def test_a_picked_client_port_taken_before_the_broker_binds_it_starts_again(
    tmp_path: Path,
) -> None:
    """A port picked free can be taken before the broker binds it (a socket that binds without
    listening passes the 'in use' check): the start failed instead of picking again."""
    run_dir = tmp_path / "k"
    calls: list[list[int]] = []
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        held = holder.getsockname()[1]
        broker = LocalKafka(run_dir, port=0, pick_ports=_first_pick_holds(held, calls))
        try:
            bootstrap = broker.up(timeout=60)
            assert len(calls) == 2
            assert bootstrap == f"127.0.0.1:{calls[1][0]}" != f"127.0.0.1:{held}"
            assert broker.status().running
            assert _listeners(run_dir) == (
                f"listeners=PLAINTEXT://127.0.0.1:{calls[1][0]},"
                f"CONTROLLER://127.0.0.1:{calls[1][1]}"
            )
            log = broker.log_file.read_text(encoding="utf-8", errors="replace")
            assert f"failed to bind to 127.0.0.1:{held}: Address already in use" in log
        finally:
            broker.down()
            _kill_all(run_dir)


def test_a_taken_controller_port_starts_again_beside_a_fixed_client_port(tmp_path: Path) -> None:
    """The controller port is always picked: taken meanwhile, it is picked again, the client
    port given by the user is kept."""
    run_dir = tmp_path / "k"
    calls: list[list[int]] = []
    with socket.socket() as holder, socket.socket() as probe:
        holder.bind(("127.0.0.1", 0))
        held = holder.getsockname()[1]
        probe.bind(("127.0.0.1", 0))
        client = probe.getsockname()[1]
        probe.close()  # free again, for the broker
        broker = LocalKafka(run_dir, port=client, pick_ports=_first_pick_holds(held, calls))
        try:
            assert broker.up(timeout=60) == f"127.0.0.1:{client}"
            assert len(calls) == 2
            controller = next(p for p in calls[1] if p != client)
            assert _listeners(run_dir) == (
                f"listeners=PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}"
            )
            log = broker.log_file.read_text(encoding="utf-8", errors="replace")
            assert f"failed to bind to 127.0.0.1:{held}: Address already in use" in log
        finally:
            broker.down()
            _kill_all(run_dir)


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
