"""A real single-node Apache Kafka broker (KRaft mode) without Docker.

The broker is assembled from Maven Central: a tiny pom names ``org.apache.kafka:kafka_2.13``
plus the logging binding the 3.x broker needs (``slf4j-reload4j``), and ``maven-dependency-plugin``
copies the runtime class path into a cache folder. A run folder holds ``server.properties``
(broker+controller on 127.0.0.1, replication factors 1, ``group.initial.rebalance.delay.ms=0``),
the formatted log directory, the broker's log and its pid. ``kafka.Kafka`` runs with a small
heap; :meth:`LocalKafka.up` returns once an AdminClient sees the broker.

Used by ``sparsewatch kafka up|down|status|fetch``, by the test fixtures when neither
``KAFKA_BOOTSTRAP_SERVERS`` nor Docker is available, and by CI.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
import zipfile
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from sparsewatch.errors import SparsewatchError

KAFKA_VERSION = "3.9.1"
SCALA_VERSION = "2.13"
SLF4J_VERSION = "1.7.36"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
# Starts tried, with new ports each time, when a port picked automatically was taken meanwhile.
START_ATTEMPTS = 3

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>sparsewatch.local</groupId>
  <artifactId>kafka-broker-classpath</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-reload4j</artifactId>
      <version>{slf4j}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J = """log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=WARN
log4j.logger.org.apache.kafka=WARN
"""


def default_cache_dir() -> Path:
    """The broker jar cache: ``$SPARSEWATCH_CACHE_DIR`` or ``~/.cache/sparsewatch``."""
    env = os.environ.get("SPARSEWATCH_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "sparsewatch"


def _broken_jars(libs: Path, version: str, listed: Collection[str] = ()) -> list[str]:
    """The jars of the class path ``libs`` that cannot be loaded: the broker's own jar and those
    ``listed`` (the complete cache's, :func:`_listed_jars`) when missing, and every jar that is
    not a whole zip file (truncated, emptied). A jar damaged or deleted after the cache was marked
    complete stopped every start with "Could not find or load main class
    kafka.tools.StorageTool" or a NoClassDefFoundError, which named neither the jar nor the
    cache."""
    wanted = {f"kafka_{SCALA_VERSION}-{version}.jar", *listed}
    broken = sorted(name for name in wanted if not (libs / name).is_file())
    for jar in sorted(libs.glob("*.jar")):
        try:
            whole = zipfile.is_zipfile(jar)
        except OSError:  # unreadable, or a folder named *.jar
            whole = False
        if not whole:
            broken.append(jar.name)
    return broken


def _listed_jars(marker: Path) -> list[str]:
    """The jars a complete cache holds, as its ``marker`` lists them after the version (a marker
    written before they were listed names none)."""
    try:
        return marker.read_text(encoding="utf-8").splitlines()[1:]
    except OSError:
        return []


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that are free right now. The sockets are all bound
    before any is released, so the system cannot hand out one port twice (two separate picks
    could: the client and controller listeners then collided)."""
    with ExitStack() as stack:
        socks = [
            stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            for _ in range(count)
        ]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _require_tool(name: str, purpose: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SparsewatchError(
            f"'{name}' was not found on PATH; it is needed to {purpose} "
            "(install Java 17+ and Maven, or use Docker: docker compose up -d kafka)"
        )
    return path


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` for the block; other processes and threads
    taking the same lock wait for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def fetch_broker_jars(cache_dir: Path | None = None, version: str = KAFKA_VERSION) -> Path:
    """Download the broker's runtime class path from Maven Central (once) and return its folder.

    Launches sharing the cache take turns, and the jars are copied into a staging folder that
    becomes ``libs`` only once complete: Maven does not overwrite a jar that is newer than its
    copy in the local repository, so the truncated jar of an interrupted copy used to stay.
    """
    # Absolute, "~" expanded: Maven reads a relative -DoutputDirectory from the pom's folder, so
    # a relative SPARSEWATCH_CACHE_DIR put the jars in a nested copy of the path and the fetch
    # failed with "no jars"
    cache = (cache_dir or default_cache_dir()).expanduser().absolute()
    cache = cache / f"kafka_{SCALA_VERSION}-{version}"
    libs = cache / "libs"
    marker = cache / ".complete"
    if marker.exists() and not _broken_jars(libs, version, _listed_jars(marker)):
        return libs
    mvn = _require_tool("mvn", "download the Kafka broker from Maven Central")
    with _exclusive(cache / ".lock"):
        # fetched by another launch while this one waited; a damaged cache is fetched again
        if marker.exists() and not _broken_jars(libs, version, _listed_jars(marker)):
            return libs
        marker.unlink(missing_ok=True)
        staging = cache / "libs.partial"
        for leftover in (staging, libs):  # an interrupted fetch's files are never trusted
            shutil.rmtree(leftover, ignore_errors=True)
        (cache / "pom.xml").write_text(
            _POM.format(scala=SCALA_VERSION, kafka=version, slf4j=SLF4J_VERSION), encoding="utf-8"
        )
        cmd = [
            mvn,
            "-B",
            "-q",
            "--strict-checksums",  # a mismatch fails the fetch (Maven's default only warns)
            "-f",
            str(cache / "pom.xml"),
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not any(staging.glob(f"kafka_{SCALA_VERSION}-{version}.jar")):
            raise SparsewatchError(
                f"could not fetch Kafka {version} from Maven Central: "
                f"{_maven_failure(proc.stdout + proc.stderr)}"
            )
        if broken := _broken_jars(staging, version):
            # Maven copies what its local repository holds, and does not check it again
            raise SparsewatchError(
                f"the Kafka {version} jars fetched into {staging} are damaged "
                f"({', '.join(broken[:3])}{', ...' if len(broken) > 3 else ''}): delete them "
                "from Maven's local repository (~/.m2/repository) and run "
                "'sparsewatch kafka fetch' again"
            )
        staging.rename(libs)
        jars = sorted(jar.name for jar in libs.glob("*.jar"))
        marker.write_text("\n".join([version, *jars]) + "\n", encoding="utf-8")
    return libs


def _maven_failure(output: str) -> str:
    """What a failed Maven run said: its first ``[ERROR]`` line (the cause; the lines after it
    are Maven's advice on debugging), else its last lines, without terminal colour codes."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", output).splitlines()]
    errors = [line for line in lines if line.startswith("[ERROR]") and line != "[ERROR]"]
    return errors[0] if errors else " | ".join([line for line in lines if line][-5:]) or "no jars"


def _property_value(text: str) -> str:
    """``text`` as a value in a Java properties file, which the broker reads as ISO-8859-1 with
    backslash escapes: a backslash doubled, anything outside printable ASCII as ``\\uXXXX``
    (UTF-16 code units). A folder named in UTF-8 was read as another folder (``é`` as ``Ã©``)."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            units = ch.encode("utf-16-be")
            out += [f"\\u{units[i : i + 2].hex()}" for i in range(0, len(units), 2)]
    return "".join(out)


def _unbindable_port(said: str) -> int | None:
    """The port a broker that stopped while starting could not bind, when that is why it stopped
    (``said``: :func:`_start_failure` of its log)."""
    match = re.search(r"failed to bind to \S*:(\d+): Address already in use", said)
    return int(match.group(1)) if match else None


class _PortTakenError(SparsewatchError):
    """The broker could not bind ``port``: taken since it was found free, when it was picked."""

    def __init__(self, message: str, port: int) -> None:
        super().__init__(message)
        self.port = port


def _start_failure(log_text: str) -> str:
    """What a broker that stopped while starting said: its first ERROR record and the exception
    lines after it, without stack frames (the log's last lines were often only frames), else its
    last lines."""
    lines = [
        line.strip()
        for line in log_text.splitlines()
        if line.strip() and not line.strip().startswith(("at ", "... "))
    ]
    first = next((i for i, line in enumerate(lines) if " ERROR " in line), None)
    return " | ".join(lines[first : first + 3] if first is not None else lines[-5:])


@dataclass(frozen=True)
class BrokerStatus:
    """What ``sparsewatch kafka status`` reports."""

    running: bool
    pid: int | None
    bootstrap: str
    run_dir: Path


class LocalKafka:
    """One local KRaft broker whose files live in ``run_dir``.

    ``port`` is the client listener (0 picks a free one); the controller listener takes another
    free port, distinct from it. ``pick_ports(n)`` returns ``n`` distinct ports free now
    (:func:`free_ports`). A picked port may be taken before the broker binds it: the start is then
    tried again with new ports, :data:`START_ATTEMPTS` times in all. ``up`` is idempotent: a
    broker already running from this folder is reused, and launches from the same folder take
    turns.
    """

    def __init__(
        self,
        run_dir: Path,
        port: int = 9092,
        heap: str = "512m",
        version: str = KAFKA_VERSION,
        cache_dir: Path | None = None,
        pick_ports: Callable[[int], list[int]] = free_ports,
    ) -> None:
        self.run_dir = Path(run_dir).absolute()  # the broker's command line names its config
        self.port = port
        self.heap = heap
        self.version = version
        self.cache_dir = cache_dir
        self.pick_ports = pick_ports

    # -- files -------------------------------------------------------------------------------
    @property
    def _pid_file(self) -> Path:
        return self.run_dir / "kafka.pid"

    @property
    def _bootstrap_file(self) -> Path:
        return self.run_dir / "bootstrap"

    @property
    def _config_file(self) -> Path:
        return self.run_dir / "server.properties"

    @property
    def log_file(self) -> Path:
        """The broker's stdout/stderr."""
        return self.run_dir / "kafka.log"

    def _write_config(self, port: int, controller_port: int) -> Path:
        log_dirs = self.run_dir / "data"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(log_dirs),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "log.retention.hours": "-1",
            "log.segment.bytes": str(64 * 1024 * 1024),
        }
        path = self._config_file
        lines = "".join(f"{k}={_property_value(v)}\n" for k, v in props.items())
        path.write_text(lines, encoding="ascii")
        (self.run_dir / "log4j.properties").write_text(_LOG4J, encoding="utf-8")
        return path

    def _read_pid(self) -> int | None:
        try:
            pid = int(self._pid_file.read_text(encoding="utf-8").strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return pid if self._runs_this_broker(pid) else None

    def _runs_this_broker(self, pid: int) -> bool:
        """Whether process ``pid`` is this folder's broker. A pid file outlives its broker (a
        crash, a reboot), and its number may since belong to any process, which ``down`` then
        killed; a broker that died unreaped (a zombie) has no command line either."""
        if not Path("/proc/self/cmdline").exists():  # no procfs here: the pid is all there is
            return True
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return b"kafka.Kafka" in args and os.fsencode(self._config_file) in args

    # -- lifecycle ---------------------------------------------------------------------------
    def status(self) -> BrokerStatus:
        """Whether the broker of this folder runs, and where clients reach it."""
        pid = self._read_pid()
        bootstrap = (
            self._bootstrap_file.read_text(encoding="utf-8").strip()
            if self._bootstrap_file.exists()
            else f"127.0.0.1:{self.port}"
        )
        return BrokerStatus(pid is not None, pid, bootstrap, self.run_dir)

    def up(self, timeout: float = 90.0) -> str:
        """Start the broker (fetching jars and formatting storage when needed); return bootstrap.

        An interrupted start (Ctrl-C, or an exception raised by a signal handler) stops the
        broker it launched: that broker runs in its own session, so the terminal's signal never
        reaches it, and it outlived the command.

        A broker already running from the run folder is reused when no port was asked for
        (``port`` 0) or the same one; on another port it is a :class:`SparsewatchError` (its
        address was returned as if started on the port asked for, and clients configured for
        that port could not reach it).
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with _exclusive(self.run_dir / ".launch.lock"):
            current = self.status()
            if current.running:
                running_port = int(current.bootstrap.rsplit(":", 1)[1])
                if self.port and self.port != running_port:
                    raise SparsewatchError(
                        f"the broker of {self.run_dir} already runs on {current.bootstrap}, "
                        f"not on port {self.port}: use that address, or stop it first "
                        "(sparsewatch kafka down)"
                    )
                wait_for_broker(current.bootstrap, timeout)
                return current.bootstrap
            return self._launch(timeout)

    def _ports(self) -> tuple[int, int]:
        """The client and controller ports of one start: distinct, the client's ``port`` unless
        that is 0."""
        picked = self.pick_ports(2)
        if not self.port:
            return picked[0], picked[1]
        return self.port, next(p for p in picked if p != self.port)

    def _launch(self, timeout: float) -> str:
        """Start the broker, with new ports when one picked automatically was taken meanwhile."""
        java = _require_tool("java", "run the Kafka broker")
        libs = fetch_broker_jars(self.cache_dir, self.version)
        attempt = 1
        while True:
            port, controller_port = self._ports()
            try:
                if _port_in_use(port):
                    raise _PortTakenError(
                        f"port {port} on 127.0.0.1 is already in use; choose another with --port "
                        "or point kafka.bootstrap_servers (SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS) "
                        "at the broker that owns it",
                        port,
                    )
                return self._start(java, libs, port, controller_port, timeout)
            except _PortTakenError as exc:
                if exc.port == self.port or attempt == START_ATTEMPTS:
                    raise
            attempt += 1

    def _start(self, java: str, libs: Path, port: int, controller_port: int, timeout: float) -> str:
        """Start the broker on ``port`` and ``controller_port``; return its bootstrap address.
        A broker that could not bind a port raises :class:`_PortTakenError`."""
        config = self._write_config(port, controller_port)
        classpath = f"{libs}{os.sep}*"
        log4j = f"-Dlog4j.configuration=file:{self.run_dir / 'log4j.properties'}"
        if not (self.run_dir / "data" / "meta.properties").exists():
            fmt = subprocess.run(
                [
                    java,
                    "-cp",
                    classpath,
                    log4j,
                    "kafka.tools.StorageTool",
                    "format",
                    # one argument: a URL-safe base64 id starts with "-" once in 64, which the
                    # tool's parser then took for an option ("expected one argument")
                    f"--cluster-id={_cluster_id()}",
                    "-c",
                    str(config),
                    "--ignore-formatted",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if fmt.returncode != 0:
                # one line: a class the JVM could not load took two ("Error: ...", "Caused by")
                lines = [line.strip() for line in fmt.stderr.splitlines() if line.strip()]
                detail = " | ".join(lines)[-300:]
                raise SparsewatchError(f"formatting Kafka storage failed: {detail} (jars: {libs})")
        with self.log_file.open("ab") as log:
            log_start = log.tell()  # the log is appended to: this start's part begins here
            proc = subprocess.Popen(
                [
                    java,
                    f"-Xmx{self.heap}",
                    f"-Xms{self.heap}",
                    "-XX:+UseSerialGC",
                    "-Djava.awt.headless=true",
                    "-cp",
                    classpath,
                    log4j,
                    "kafka.Kafka",
                    str(config),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            self._pid_file.write_text(str(proc.pid), encoding="utf-8")
            bootstrap = f"127.0.0.1:{port}"
            self._bootstrap_file.write_text(bootstrap, encoding="utf-8")
            wait_for_broker(bootstrap, timeout, process=proc)
        except SparsewatchError as exc:
            self._stop(proc.pid)
            with self.log_file.open("rb") as log:
                log.seek(log_start)
                said = _start_failure(log.read().decode("utf-8", errors="replace"))
            taken = _unbindable_port(said)
            if taken is not None:
                raise _PortTakenError(f"{exc}; broker log: {said}", taken) from None
            raise SparsewatchError(f"{exc}; broker log: {said}") from None
        except BaseException:
            self._stop(proc.pid)
            raise
        return bootstrap

    def down(self, timeout: float = 30.0) -> bool:
        """Stop the broker cleanly (SIGTERM, then SIGKILL after ``timeout``); True if one ran."""
        pid = self._read_pid()
        if pid is None:
            self._pid_file.unlink(missing_ok=True)
            return False
        self._stop(pid, timeout)
        return True

    def _stop(self, pid: int, timeout: float = 30.0) -> None:
        """SIGTERM the broker ``pid``, SIGKILL it after ``timeout``; forget its pid file."""
        with suppress(ProcessLookupError):  # it exited (and was reaped) already
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _alive(pid):
                break
            time.sleep(0.2)
        else:
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
        self._pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """Kill the broker abruptly (SIGKILL), as a crash would; the log directory survives."""
        pid = self._read_pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
        self._pid_file.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs: reaped here when it is this process's child; a zombie
    (exited, its parent not reaping it: the launcher still running, or a container's init that
    reaps nothing) has ended too, though a signal still reaches it: ``down`` waited for it for
    ever."""
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether process ``pid`` has exited and waits to be reaped (Linux's procfs; elsewhere,
    False)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    # "pid (command) state ...": the command may hold spaces and parentheses
    return stat[stat.rfind(")") + 2 :].startswith("Z")


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def wait_for_broker(
    bootstrap: str, timeout: float = 60.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until an AdminClient lists the cluster's brokers, or raise after ``timeout``."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise SparsewatchError(f"the Kafka broker exited with status {process.returncode}")
        try:
            meta = admin.list_topics(timeout=2.0)
            if meta.brokers:
                return
        except Exception:
            time.sleep(0.5)
    raise SparsewatchError(f"no Kafka broker answered at {bootstrap} within {timeout:.0f}s")
