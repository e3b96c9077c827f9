"""Configuration: defaults that run, a TOML file, then ``SPARSEWATCH_*`` environment variables.

Precedence (later wins): the defaults below, the TOML file (``--config`` or ``SPARSEWATCH_CONFIG``),
environment variables. A key ``key`` of section ``[section]`` is overridden by
``SPARSEWATCH_<SECTION>_<KEY>``; a top-level key by ``SPARSEWATCH_<KEY>``. For example::

    data_dir = "./data"                         # SPARSEWATCH_DATA_DIR
    database_url = ""                           # SPARSEWATCH_DATABASE_URL ("": SQLite in data_dir)
    [kafka]
    bootstrap_servers = "127.0.0.1:9092"        # SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS
    topic_prefix = "sparsewatch"                # SPARSEWATCH_KAFKA_TOPIC_PREFIX
    [kafka.client]
    "sasl.password" = "..."                     # SPARSEWATCH_KAFKA_CLIENT_SASL_PASSWORD

``[kafka.client]`` is a table of librdkafka properties given to every Kafka client (see
:class:`KafkaConfig`); its variables follow the Confluent images' convention: after
``SPARSEWATCH_KAFKA_CLIENT_``, ``_`` is a period and ``__`` an underscore, lowercased.

Every option, its default and its meaning is listed in the README's configuration table, which
is generated from :func:`describe`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

from sparsewatch.consumers.windowing import IDLE_CLOSE
from sparsewatch.errors import SparsewatchError

if TYPE_CHECKING:
    from sparsewatch.consumers.kafka_client import KafkaConnection

# Kafka's rule for topic names: ASCII letters, digits, '.', '_' and '-', at most 249 characters,
# not '.' or '..'
MAX_TOPIC_CHARS = 249
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]+")
# the longest suffix the workers append to the prefix (``<prefix>.scores``)
_LONGEST_TOPIC_SUFFIX = ".scores"
# "<group_id>.detector" (the longest group suffix) fits the stores' VARCHAR(200) group column
_MAX_GROUP_ID_CHARS = 200 - len(".detector")


def topic_name_problem(name: str) -> str | None:
    """Why Kafka would refuse ``name`` as a topic name, or ``None`` when it is legal."""
    if not _TOPIC_CHARS.fullmatch(name):
        return "a topic name holds only ASCII letters, digits, '.', '_' and '-'"
    if name in (".", ".."):
        return "a topic name cannot be '.' or '..'"
    if len(name) > MAX_TOPIC_CHARS:
        return f"a topic name has at most {MAX_TOPIC_CHARS} characters"
    return None


ENV_PREFIX = "SPARSEWATCH_"
# SPARSEWATCH_KAFKA_CLIENT_<NAME>: the client property <NAME> (see _client_env)
CLIENT_ENV_PREFIX = ENV_PREFIX + "KAFKA_CLIENT_"
_UTF8_BOM = b"\xef\xbb\xbf"
# SPARSEWATCH_* variables that are not options: the configuration file, the CLI's --debug, the
# broker launcher's jar cache and the test suite's PostgreSQL server.
OTHER_ENV_NAMES = frozenset(
    ENV_PREFIX + name for name in ("CONFIG", "DEBUG", "CACHE_DIR", "TEST_DATABASE_URL")
)
# Where a worker's SQL transactions run (consumers/writer.py): a child process or a thread.
WRITER_MODES = ("process", "thread")
# How the tokenizer reads scripts written without spaces: text_features.UNSEGMENTED_MODES (not
# imported: that would load scikit-learn and SciPy to read a configuration).
UNSEGMENTED_MODES = ("bigrams", "words")


@dataclass
class KafkaConfig:
    """Where the broker is, how topics are named, and the librdkafka properties of every client
    (``client``: security and tuning; strings, a TOML integer or boolean taken as its text; those
    sparsewatch sets itself, :data:`~sparsewatch.consumers.kafka_client.OWNED_PROPERTIES`, and
    unknown ones are refused at load; never shown, as their values hold secrets)."""

    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = "sparsewatch"
    group_id: str = "sparsewatch"
    partitions: int = 4
    # every alert the workers store also goes to <prefix>.alerts (consumers/writer.py)
    publish_alerts: bool = True
    client: dict[str, str] = field(default_factory=dict, repr=False)

    def topic(self, suffix: str) -> str:
        """``<prefix>.<suffix>``, e.g. ``sparsewatch.docs``."""
        return f"{self.topic_prefix}.{suffix}"

    def connection(self, bootstrap: str | None = None) -> KafkaConnection:
        """The broker at ``bootstrap`` (default: ``bootstrap_servers``) with the client
        properties: what every Kafka client is made for (the properties were checked at load)."""
        from sparsewatch.consumers.kafka_client import KafkaConnection

        return KafkaConnection.of(bootstrap or self.bootstrap_servers, self.client)


@dataclass
class WindowConfig:
    """How each stream is cut into tumbling windows (by event time, or by document count)."""

    size: str = "1d"
    count: int = 0
    allowed_lateness: str = "0s"
    max_ahead: str = "1d"
    idle_timeout_s: float = 30.0
    idle_close: str = "ended"
    checkpoint_every: int = 10
    dedup_documents: int = 20000

    def max_ahead_ms(self) -> int | None:
        """How far (ms) a document's event time may lie after its message's Kafka timestamp;
        None when unchecked (``max_ahead = "off"``, or count windows, which event time does not
        cut). The detector dead-letters a document beyond it, and ``replay`` rejects one."""
        if self.count > 0 or self.max_ahead.strip().lower() == "off":
            return None
        return parse_duration_ms(self.max_ahead)


@dataclass
class DetectorConfig:
    """The detector worker: l1 novelty (always), topics and emerging topics (optional)."""

    novel_mode: str = "top_q"
    novel_top_q: float = 0.05
    novel_threshold: float = 0.95
    novel_similarity: float = 0.5
    score_margin: bool = True
    initial_atoms: int = 200
    max_atoms: int = 1500
    new_atoms_per_window: int = 1000
    warmup_documents: int = 200
    max_vocabulary: int = 20000
    max_token_chars: int = 40
    unsegmented: str = "bigrams"
    max_terms_per_doc: int = 0
    max_step_documents: int = 1000
    snapshot_every: int = 10
    topics: bool = True
    n_topics: int = 10
    topic_reseeds_per_window: int = 1
    emerging_topics: bool = True
    max_topics: int = 30
    emerging_per_window: int = 3
    emerging_min_documents: int = 3
    emerging_repeat_windows: int = 3
    emerging_max_documents: int = 2000
    top_terms: int = 8


@dataclass
class AnomalyConfig:
    """The anomaly worker: DL-OCSVM over the detector's per-document representation."""

    enabled: bool = True
    reference_documents: int = 1000
    refit_every_windows: int = 20
    refit_drift_p: float = 1e-3
    contamination: float = 0.05
    n_atoms: int = 8
    sparsity: int = 2


@dataclass
class Config:
    """All of sparsewatch's settings."""

    data_dir: str = "./data"
    database_url: str = ""
    log_level: str = "INFO"
    metrics_port: int = 0
    metrics_address: str = "127.0.0.1"
    health_stall_s: float = 600.0
    max_text_bytes: int = 100_000
    blas_threads: int = 1
    gc_threshold: int = 10_000
    writer: str = "process"
    heap_free_limit_mb: float = 64.0
    max_idle_streams: int = 16
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    windows: WindowConfig = field(default_factory=WindowConfig)
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    anomaly: AnomalyConfig = field(default_factory=AnomalyConfig)

    @property
    def resolved_database_url(self) -> str:
        """``database_url``, or a SQLite file under ``data_dir`` when it is empty."""
        if self.database_url:
            return self.database_url
        from sparsewatch.storage.engine import sqlite_url  # SQLAlchemy only when needed

        return sqlite_url(self.data_path() / "sparsewatch.db")

    def data_path(self) -> Path:
        """``data_dir`` as an absolute path, ``~`` expanded (a TOML file's ``"~/sw"`` made a
        folder named ``~`` in the working directory)."""
        return Path(self.data_dir).expanduser().resolve()


# The span of event times a document may have (1970..2200): a window this long holds them all.
_MAX_DURATION_MS = 7_258_118_400_000
_MAX_DAYS = _MAX_DURATION_MS // 86_400_000
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def parse_duration_ms(text: str) -> int:
    """Milliseconds in a duration such as ``"90s"``, ``"15m"``, ``"1h"``, ``"2d"``, ``"500ms"``."""
    value = text.strip().lower()
    for unit in sorted(_UNITS_MS, key=len, reverse=True):
        if value.endswith(unit):
            number = value[: -len(unit)].strip()
            try:
                amount = float(number)
            except ValueError:
                break
            if not 0 <= amount <= _MAX_DURATION_MS / _UNITS_MS[unit]:  # also refuses nan, inf
                break
            return round(amount * _UNITS_MS[unit])
    raise SparsewatchError(
        f"{text!r} is not a duration of at most {_MAX_DAYS}d (examples: 500ms, 30s, 15m, 1h, 2d)"
    )


def _env_name(key: str) -> str:
    """The variable of option ``key`` (``kafka.partitions`` -> ``SPARSEWATCH_KAFKA_PARTITIONS``)."""
    return ENV_PREFIX + key.replace(".", "_").upper()


def _coerce(value: str, typ: Any, key: str) -> Any:
    name = _env_name(key)
    try:
        if typ is bool:
            lowered = value.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if typ is int:
            return int(value)
        if typ is float:
            number = float(value)
            if not math.isfinite(number):
                raise SparsewatchError(f"{name}={value!r} ('{key}') is not a finite number")
            return number
        return value
    except ValueError:
        raise SparsewatchError(
            f"{name}={value!r} ('{key}') is not a valid {typ.__name__}"
        ) from None


def _apply(obj: Any, values: dict[str, Any], where: str) -> None:
    hints = get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    for key, value in values.items():
        if key not in names:
            close = difflib.get_close_matches(key, sorted(names), n=1)
            hint = f" (did you mean '{where}{close[0]}'?)" if close else ""
            raise SparsewatchError(f"unknown configuration key '{where}{key}'{hint}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise SparsewatchError(f"'{where}{key}' must be a table")
            _apply(current, value, f"{where}{key}.")
            continue
        if isinstance(current, dict):
            setattr(obj, key, _client_table(value, f"{where}{key}"))
            continue
        typ = hints[key]
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:  # (an integer of 400 digits)
                raise SparsewatchError(
                    f"'{where}{key}' ({_env_name(where + key)}) must be a finite number, got an "
                    "integer too large for one"
                ) from None
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise SparsewatchError(
                f"'{where}{key}' ({_env_name(where + key)}) must be {typ.__name__}, got "
                f"{type(value).__name__}"
            )
        if typ is float and not math.isfinite(value):  # TOML has nan and inf
            raise SparsewatchError(
                f"'{where}{key}' ({_env_name(where + key)}) must be a finite number, got {value!r}"
            )
        if typ is str and "\x00" in value:  # TOML's "\u0000"; no path, URL or name holds one
            raise SparsewatchError(
                f"'{where}{key}' ({_env_name(where + key)}) must not contain a NUL character, got "
                f"{value!r}"
            )
        setattr(obj, key, value)


def _client_table(value: Any, key: str) -> dict[str, str]:
    """The client properties of the file's table ``key``: strings, an integer or boolean taken
    as librdkafka spells it (``5000``, ``true``); another type is refused (a float, an array)."""
    if not isinstance(value, dict):
        raise SparsewatchError(f"'{key}' must be a table of librdkafka properties")
    table = {}
    for name, item in value.items():
        if isinstance(item, bool):
            item = "true" if item else "false"
        elif isinstance(item, int):
            item = str(item)
        if isinstance(item, dict):  # TOML reads an unquoted dotted key as tables
            dotted = next(iter(_dotted_keys(name, item)), name)
            raise SparsewatchError(
                f"'{key}' property {dotted!r} is written as TOML tables: quote the property's "
                f'name, "{dotted}" = ...'
            )
        if not isinstance(item, str):
            raise SparsewatchError(
                f"'{key}' property {name!r} must be a string, an integer or a boolean, got "
                f"{type(item).__name__}"
            )
        table[name] = item
    return table


def _dotted_keys(name: str, table: dict[str, Any]) -> list[str]:
    """The full dotted names of the values TOML nested under ``name`` (``sasl.username = "x"``
    unquoted is ``{"sasl": {"username": "x"}}``)."""
    names = []
    for key, value in table.items():
        inner = _dotted_keys(key, value) if isinstance(value, dict) else [key]
        names += [f"{name}.{rest}" for rest in inner]
    return names


def _client_env(env: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Client property -> (value, variable) of the ``SPARSEWATCH_KAFKA_CLIENT_<NAME>`` variables,
    the Confluent images' convention: ``_`` is a period, ``__`` an underscore, lowercased
    (``SPARSEWATCH_KAFKA_CLIENT_SASL_PASSWORD`` is ``sasl.password``)."""
    found = {}
    for var, value in env.items():
        if var.startswith(CLIENT_ENV_PREFIX):
            parts = var[len(CLIENT_ENV_PREFIX) :].lower().split("__")
            found["_".join(part.replace("_", ".") for part in parts)] = (value, var)
    return found


def _apply_env(obj: Any, env: dict[str, str], prefix: str, where: str = "") -> None:
    hints = get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        current = getattr(obj, f.name)
        name = f"{prefix}{f.name.upper()}"
        if dataclasses.is_dataclass(current):
            _apply_env(current, env, f"{name}_", f"{where}{f.name}.")
        elif isinstance(current, dict):  # (env wins, property by property)
            current.update({k: v for k, (v, _) in _client_env(env).items()})
        elif name in env:
            setattr(obj, f.name, _coerce(env[name], hints[f.name], where + f.name))


# Kubernetes' service links: for every Service of the namespace (unless the pod sets
# enableServiceLinks: false) a pod gets NAME_SERVICE_HOST, NAME_SERVICE_PORT[_PORTNAME],
# NAME_PORT=tcp://ip:port and NAME_PORT_<n>_<TCP|UDP|SCTP>[_PROTO|_PORT|_ADDR], NAME its name in
# capitals; a Service named sparsewatch... gives SPARSEWATCH_ ones (SPARSEWATCH_METRICS_PORT too,
# for sparsewatch-metrics, an option's name: its URL value is no port number).
_SERVICE_LINK_NAME = re.compile(
    r"(?:\w+_)?(?:SERVICE_(?:HOST|PORT(?:_\w+)?)|PORT_\d+_(?:TCP|UDP|SCTP)(?:_PROTO|_PORT|_ADDR)?)"
)
_SERVICE_LINK_URL = re.compile(r"(?:tcp|udp|sctp)://\S+:\d+")


def _without_service_links(env: dict[str, str], known: set[str]) -> dict[str, str]:
    """``env`` without the ``SPARSEWATCH_*`` variables Kubernetes sets for a Service (they were
    refused as unknown options: no command started in such a namespace)."""

    def is_link(name: str, value: str) -> bool:
        if not name.startswith(ENV_PREFIX):
            return False
        rest = name[len(ENV_PREFIX) :]
        if _SERVICE_LINK_URL.fullmatch(value) and (rest == "PORT" or rest.endswith("_PORT")):
            return True
        return name not in known and _SERVICE_LINK_NAME.fullmatch(rest) is not None

    return {name: value for name, value in env.items() if not is_link(name, value)}


def _known_env_names() -> set[str]:
    """The variables of the options, and :data:`OTHER_ENV_NAMES`."""
    known = {name for _, name, _ in describe() if not name.startswith(CLIENT_ENV_PREFIX)}
    return known | OTHER_ENV_NAMES


def _check_env_names(env: dict[str, str], known: set[str]) -> None:
    """Refuse a ``SPARSEWATCH_*`` variable that names no option, as an unknown key of the file
    is refused, naming the closest option when one is close (a misspelt variable used to be
    ignored: the worker ran with the default the user meant to change)."""
    for name in sorted(env):
        if name.startswith(CLIENT_ENV_PREFIX) and len(name) > len(CLIENT_ENV_PREFIX):
            continue  # a client property: librdkafka knows its names (_check_client)
        if name.startswith(ENV_PREFIX) and name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise SparsewatchError(
                f"unknown environment variable {name}{hint}: the README's configuration table "
                "lists every option and its variable"
            )


def load_config(path: str | Path | None = None, env: dict[str, str] | None = None) -> Config:
    """Build the configuration from defaults, the TOML file at ``path`` and the environment.

    A ``SPARSEWATCH_*`` variable that is neither an option nor one of :data:`OTHER_ENV_NAMES`
    is refused (:class:`SparsewatchError`), as an unknown key of the file is; those Kubernetes
    sets for a Service named ``sparsewatch...`` are ignored."""
    known = _known_env_names()
    env = _without_service_links(dict(os.environ) if env is None else env, known)
    _check_env_names(env, known)
    config = Config()
    path = path or env.get(f"{ENV_PREFIX}CONFIG")
    if path:
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
            # A UTF-8 byte-order mark (Windows editors write one) is not part of the text: TOML's
            # parser refused it as "Invalid statement (at line 1, column 1)" of a line that
            # looked right. Error positions stay those of the file's bytes.
            bom = len(_UTF8_BOM) if raw.startswith(_UTF8_BOM) else 0
            try:
                data = tomllib.loads(raw[bom:].decode("utf-8"))
            except UnicodeDecodeError as exc:
                exc.start += bom
                raise
        except FileNotFoundError:
            raise SparsewatchError(f"configuration file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise SparsewatchError(f"configuration file {path} is not valid TOML: {exc}") from None
        except RecursionError:  # (tomllib parses nested arrays and tables recursively)
            raise SparsewatchError(
                f"configuration file {path} is not valid TOML: nested too deeply"
            ) from None
        except UnicodeDecodeError as exc:  # TOML is UTF-8
            raise SparsewatchError(
                f"configuration file {path} is not UTF-8 (byte {exc.start + 1}): TOML is UTF-8"
            ) from None
        except OSError as exc:  # a folder, no permission
            raise SparsewatchError(
                f"cannot read configuration file {path}: {exc.strerror}"
            ) from None
        try:
            _apply(config, data, "")
        except SparsewatchError as exc:
            raise SparsewatchError(f"configuration file {path}: {exc}") from None
    _apply_env(config, env, ENV_PREFIX)
    _check_ranges(config)
    _check_maxima(config)
    _check_combinations(config)
    _check_client(config, path, env)
    return config


def _check_client(config: Config, path: str | Path | None, env: dict[str, str]) -> None:
    """Refuse, in one line naming the property and its variable or file, a client property that
    librdkafka does not know or refuses, or that sparsewatch sets itself (never its value when
    a secret)."""
    if not config.kafka.client:
        return
    from sparsewatch.consumers.kafka_client import ClientPropertyError

    try:
        config.kafka.connection()
    except ClientPropertyError as exc:
        from_env = _client_env(env)
        if exc.name in from_env:
            where = f"environment variable {from_env[exc.name][1]}"
        elif exc.name is not None:
            where = f"configuration file {path}: [kafka.client]"
        else:
            where = "kafka.client (file and SPARSEWATCH_KAFKA_CLIENT_* variables)"
        said = f"client {exc}" if exc.name else str(exc)  # "librdkafka refused them: ..."
        said = " ".join(said.split())  # (the client library's text ends in a newline)
        raise SparsewatchError(f"{where}: {said}") from None


# (section, option) -> (predicate, what the value must be); checked once the file and the
# environment are applied, so a worker never starts with a value its models would reject later.
_LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
# the largest heap_free_limit_mb (8 EiB, 2**63 bytes): beyond any memory, and its bytes an integer
_MAX_HEAP_FREE_LIMIT_MB = 2**43
# The largest value of an integer setting (or command-line option) without a maximum of its own:
# counts, window numbers and offsets are 64-bit integers in numpy, the checkpoints and the
# databases (a larger one failed deep inside, naming no option, or long after the start).
MAX_INT64 = 2**63 - 1
# The most topics (MOR-NMF rank, dynamic-NMF topics, emerging ones added per window) and DL-OCSVM
# atoms: a stream's models hold dense k x k matrices (800 MB each at 10,000); MOR-NMF or DL-OCSVM
# of 100,000 failed allocating 75 GiB, and the anomaly worker with 10**20 atoms stopped at its
# first fit with "Python int too large to convert to C long".
MAX_MODEL_RANK = 10_000
_RANK_REASON = "a stream's models hold dense matrices of this many rows and columns"
# TOML key -> (the largest value, why): the integer settings with a maximum of their own, but for
# those _RANGES checks on both sides (metrics_port, blas_threads, ...); the others' is MAX_INT64.
_MAXIMA: dict[str, tuple[int, str]] = {
    "detector.n_topics": (MAX_MODEL_RANK, _RANK_REASON),
    "detector.max_topics": (MAX_MODEL_RANK, _RANK_REASON),
    "detector.emerging_per_window": (MAX_MODEL_RANK, _RANK_REASON),
    "anomaly.n_atoms": (MAX_MODEL_RANK, _RANK_REASON),
}


def _duration_ms(text: str) -> int | None:
    try:
        return parse_duration_ms(text)
    except SparsewatchError:
        return None


_RANGES: dict[tuple[str, str], tuple[Callable[[Any], bool], str]] = {
    ("", "log_level"): (lambda v: v.upper() in _LOG_LEVELS, f"one of {', '.join(_LOG_LEVELS)}"),
    ("", "metrics_port"): (lambda v: 0 <= v <= 65535, "in 0..65535"),
    # (resolved when the endpoint starts: a name no resolver knows is refused then, in one line)
    ("", "metrics_address"): (
        lambda v: bool(v.strip()),
        "an IP address or host name to serve on (127.0.0.1; 0.0.0.0 or :: for every interface)",
    ),
    # (a loop polls every 0.5 s at most: a shorter stall would be every pause between polls)
    ("", "health_stall_s"): (lambda v: v >= 1, ">= 1"),
    ("", "max_text_bytes"): (lambda v: v >= 1, ">= 1"),
    # (empty, as from SPARSEWATCH_DATA_DIR=$UNSET: the database went to the working directory)
    ("", "data_dir"): (lambda v: bool(v.strip()), "a folder (not blank; '.' for this one)"),
    # a C int: a larger count was refused by the BLAS library's ctypes call, naming no option
    ("", "blas_threads"): (
        lambda v: 0 <= v < 2**31,
        "in 0..2147483647 (0: the library's default)",
    ),
    ("", "gc_threshold"): (lambda v: 0 <= v < 2**31, "in 0..2147483647 (0: Python's default)"),
    # bytes = MB * 2**20 must be a finite number: 1e308 stopped the workers with "cannot
    # convert float infinity to integer"
    ("", "heap_free_limit_mb"): (
        lambda v: abs(v) <= _MAX_HEAP_FREE_LIMIT_MB,
        f"in -{_MAX_HEAP_FREE_LIMIT_MB}..{_MAX_HEAP_FREE_LIMIT_MB} (MB)",
    ),
    ("", "max_idle_streams"): (lambda v: v >= 0, ">= 0"),
    ("", "writer"): (lambda v: v in WRITER_MODES, " or ".join(map(repr, WRITER_MODES))),
    # Kafka counts partitions in a 32-bit int (a larger count was "cannot reach Kafka")
    ("kafka", "partitions"): (lambda v: 1 <= v < 2**31, "in 1..2147483647"),
    # empty: "cannot reach Kafka at :" half a minute later; a group "" re-read every topic from
    # the start under the group ".detector" and published every window again
    ("kafka", "bootstrap_servers"): (lambda v: bool(v.strip()), "a non-empty host:port list"),
    # the stores' checkpoints and offsets key rows by "<group_id>.detector" in VARCHAR(200):
    # longer passed on SQLite and failed the first checkpoint on PostgreSQL
    ("kafka", "group_id"): (
        lambda v: bool(v.strip()) and len(v) <= _MAX_GROUP_ID_CHARS,
        f"non-empty, at most {_MAX_GROUP_ID_CHARS} characters",
    ),
    # (empty: the topics ".docs", ".scores", ...)
    ("kafka", "topic_prefix"): (
        lambda v: bool(v) and topic_name_problem(v + _LONGEST_TOPIC_SUFFIX) is None,
        "non-empty, ASCII letters, digits, '.', '_' and '-', at most "
        f"{MAX_TOPIC_CHARS - len(_LONGEST_TOPIC_SUFFIX)} characters (Kafka's topic names)",
    ),
    ("windows", "size"): (
        lambda v: (_duration_ms(v) or 0) > 0,
        f"a positive duration of at most {_MAX_DAYS}d (500ms, 30s, 15m, 1h, 2d)",
    ),
    ("windows", "allowed_lateness"): (
        lambda v: _duration_ms(v) is not None,
        f"a duration of at most {_MAX_DAYS}d (0s, 30s, 15m, ...)",
    ),
    ("windows", "max_ahead"): (
        lambda v: v.strip().lower() == "off" or _duration_ms(v) is not None,
        f"a duration of at most {_MAX_DAYS}d (1h, 1d, ...) or 'off'",
    ),
    ("windows", "count"): (lambda v: v >= 0, ">= 0"),
    # (a quiet worker checks its streams four times per timeout: 0.001 s kept a core busy)
    ("windows", "idle_timeout_s"): (lambda v: v >= 0.1, ">= 0.1"),
    ("windows", "idle_close"): (lambda v: v in IDLE_CLOSE, "'ended' or 'all'"),
    ("windows", "checkpoint_every"): (lambda v: v >= 1, ">= 1"),
    ("windows", "dedup_documents"): (lambda v: v >= 0, ">= 0 (0: open windows only)"),
    ("detector", "novel_mode"): (lambda v: v in ("top_q", "threshold"), "'top_q' or 'threshold'"),
    ("detector", "novel_top_q"): (lambda v: 0 < v <= 1, "in (0, 1]"),
    ("detector", "novel_threshold"): (lambda v: v >= 0, ">= 0 (scores are >= 0)"),
    ("detector", "novel_similarity"): (lambda v: 0 <= v <= 1, "in [0, 1] (0: off)"),
    ("detector", "top_terms"): (lambda v: v >= 1, ">= 1"),
    ("detector", "initial_atoms"): (lambda v: v >= 1, ">= 1"),
    ("detector", "max_atoms"): (lambda v: v >= 1, ">= 1"),
    ("detector", "new_atoms_per_window"): (lambda v: v >= 0, ">= 0"),
    ("detector", "warmup_documents"): (lambda v: v >= 1, ">= 1"),
    ("detector", "max_vocabulary"): (lambda v: v >= 1, ">= 1"),
    ("detector", "max_token_chars"): (lambda v: v >= 1, ">= 1"),
    ("detector", "unsegmented"): (
        lambda v: v in UNSEGMENTED_MODES,
        " or ".join(map(repr, UNSEGMENTED_MODES)),
    ),
    ("detector", "max_terms_per_doc"): (lambda v: v >= 0, ">= 0 (0: all terms)"),
    ("detector", "max_step_documents"): (lambda v: v >= 0, ">= 0 (0: no bound)"),
    ("detector", "snapshot_every"): (lambda v: v >= 1, ">= 1"),
    ("detector", "n_topics"): (lambda v: v >= 1, ">= 1"),
    ("detector", "topic_reseeds_per_window"): (lambda v: v >= 0, ">= 0 (0: MOR-NMF as published)"),
    ("detector", "max_topics"): (lambda v: v >= 1, ">= 1"),
    ("detector", "emerging_per_window"): (lambda v: v >= 1, ">= 1"),
    ("detector", "emerging_min_documents"): (lambda v: v >= 0, ">= 0"),
    ("detector", "emerging_repeat_windows"): (lambda v: v >= 0, ">= 0 (0: alert every one)"),
    ("detector", "emerging_max_documents"): (lambda v: v >= 0, ">= 0 (0: every document)"),
    ("anomaly", "reference_documents"): (lambda v: v >= 2, ">= 2"),
    ("anomaly", "refit_every_windows"): (lambda v: v >= 1, ">= 1"),
    ("anomaly", "refit_drift_p"): (lambda v: 0 <= v < 1, "in [0, 1)"),
    ("anomaly", "contamination"): (lambda v: 0 < v < 0.5, "in (0, 0.5)"),
    ("anomaly", "n_atoms"): (lambda v: v >= 1, ">= 1"),
    ("anomaly", "sparsity"): (lambda v: v >= 1, ">= 1"),
}


def _check_ranges(config: Config) -> None:
    """Reject out-of-range values with one line naming the option and its variable."""
    for (section, option), (ok, expected) in _RANGES.items():
        value = getattr(getattr(config, section) if section else config, option)
        if not ok(value):
            key = f"{section}.{option}" if section else option
            env = _env_name(key)
            raise SparsewatchError(f"'{key}' ({env}) must be {expected}, got {value!r}")


def _check_maxima(config: Config) -> None:
    """Reject an integer setting above its maximum (:data:`_MAXIMA`, else :data:`MAX_INT64`) with
    one line naming the option and its variable (``anomaly.n_atoms = 10**20`` loaded, and the
    anomaly worker stopped at its first fit with "OverflowError: Python int too large to convert
    to C long")."""
    for key, value in _values(config):
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        high, why = _MAXIMA.get(key, (MAX_INT64, "the largest 64-bit integer"))
        if value > high:
            raise SparsewatchError(
                f"'{key}' ({_env_name(key)}) must be at most {high} ({why}), got {value!r}"
            )


def _check_combinations(config: Config) -> None:
    """Reject options that are valid alone but not together (the models refused them only when
    first fitted, with a message naming no option, and the worker stopped on every restart)."""
    detector, anomaly = config.detector, config.anomaly
    if detector.max_topics < detector.n_topics:
        raise SparsewatchError(
            f"{_named('detector.max_topics')} ({detector.max_topics}) must be at least "
            f"{_named('detector.n_topics')} ({detector.n_topics}): the emerging-topic model "
            "would drop its initial topics"
        )
    if detector.emerging_topics and detector.emerging_per_window >= detector.max_topics:
        raise SparsewatchError(
            f"{_named('detector.emerging_per_window')} ({detector.emerging_per_window}) must be "
            f"below {_named('detector.max_topics')} ({detector.max_topics}): the emerging-topic "
            "model would track no topic from one window to the next"
        )
    needed = max(3, anomaly.sparsity + 1)
    if anomaly.reference_documents < needed:
        raise SparsewatchError(
            f"{_named('anomaly.reference_documents')} ({anomaly.reference_documents}) must be at "
            f"least {needed}: DL-OCSVM with {_named('anomaly.sparsity')} {anomaly.sparsity} needs "
            "max(3, sparsity + 1) reference documents"
        )


def _named(key: str) -> str:
    """Option ``key`` and its variable, as refusals name them."""
    return f"'{key}' ({_env_name(key)})"


def _values(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(TOML key, value) of every option of ``obj`` (a :class:`Config` or one of its sections)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _values(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", value


def describe(config: Config | None = None) -> list[tuple[str, str, str]]:
    """(TOML key, environment variable, default) for every option, for the README's table (the
    client properties' values redacted when secrets, their variables one per property)."""
    return [
        (
            key,
            CLIENT_ENV_PREFIX + "<NAME>" if key == "kafka.client" else _env_name(key),
            _shown(value),
        )
        for key, value in _values(config or Config())
    ]


def _shown(value: Any) -> str:
    """An option's value as :func:`describe` shows it: its ``repr``, but for the secrets of the
    client properties."""
    if isinstance(value, dict) and value:
        from sparsewatch.consumers.kafka_client import redacted

        value = redacted(value)
    return repr(value)
