"""Configuration: file and environment applied, out-of-range values refused with one line."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
from sparsewatch.consumers.detector_core import build_models

from sparsewatch.config import OTHER_ENV_NAMES, Config, describe, load_config, parse_duration_ms
from sparsewatch.errors import SparsewatchError
from tests.support.cli import run_process

_SIZE = "a positive duration of at most 84006d (500ms, 30s, 15m, 1h, 2d)"
_LATENESS = "a duration of at most 84006d (0s, 30s, 15m, ...)"


def test_defaults_load_and_every_option_is_described() -> None:
    config = load_config(env={})
    assert config == Config()
    rows = {key: env for key, env, _ in describe()}
    assert rows["detector.initial_atoms"] == "SPARSEWATCH_DETECTOR_INITIAL_ATOMS"
    # every field of every section is listed, under its TOML key and its variable
    fields = {f.name for f in dataclasses.fields(Config) if f.name not in _SECTIONS}
    for section in _SECTIONS:
        fields |= {f"{section}.{f.name}" for f in dataclasses.fields(getattr(config, section))}
    assert set(rows) == fields
    # (the client properties: one variable each, SPARSEWATCH_KAFKA_CLIENT alone is refused)
    assert rows.pop("kafka.client") == "SPARSEWATCH_KAFKA_CLIENT_<NAME>"
    assert all(env == "SPARSEWATCH_" + key.replace(".", "_").upper() for key, env in rows.items())


_SECTIONS = ("kafka", "windows", "detector", "anomaly")
_README = Path(__file__).resolve().parents[1] / "README.md"


def _value(text: str) -> object:
    """A default as the README writes it (TOML spelling) or as ``describe`` does (``repr``)."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return float(text)
    except ValueError:
        return text.strip("'\"")


def test_readme_configuration_table_is_the_code() -> None:
    """The README's table lists every option with its variable and default, and nothing else."""
    table = {}
    for line in _README.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`SPARSEWATCH_"):
            table[cells[0].strip("`")] = (cells[1].strip("`"), _value(cells[2].strip("`")))
    expected = {key: (env, _value(default)) for key, env, default in describe()}
    assert table == expected


def test_the_file_overrides_the_defaults_and_the_environment_overrides_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sparsewatch.toml"
    path.write_text(
        'data_dir = "/srv/sw"\nheap_free_limit_mb = 32\n'
        '[kafka]\nbootstrap_servers = "file:1"\ntopic_prefix = "fromfile"\n'
        "[detector]\ntopics = false\nnovel_top_q = 0.25\n"
        '[windows]\nsize = "15m"\n'
    )
    env = {
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": "fromenv",
        "SPARSEWATCH_DETECTOR_TOPICS": "yes",
        "SPARSEWATCH_WINDOWS_COUNT": "7",
    }
    for config in (
        load_config(path, env=env),
        load_config(env={**env, "SPARSEWATCH_CONFIG": str(path)}),
    ):
        assert config.data_dir == "/srv/sw" and config.heap_free_limit_mb == 32.0
        assert isinstance(config.heap_free_limit_mb, float)  # a TOML integer for a float option
        assert config.kafka.bootstrap_servers == "file:1"  # the file, not the default
        assert config.kafka.topic_prefix == "fromenv"  # the environment wins over the file
        assert config.detector.topics is True and config.detector.novel_top_q == 0.25
        assert (config.windows.size, config.windows.count) == ("15m", 7)
        assert config.kafka.group_id == Config().kafka.group_id  # untouched: the default
        assert (
            config.resolved_database_url == f"sqlite:///{Path('/srv/sw').resolve()}/sparsewatch.db"
        )
    # an explicit path wins over SPARSEWATCH_CONFIG
    other = tmp_path / "other.toml"
    other.write_text('[kafka]\ntopic_prefix = "other"\n')
    assert load_config(other, env={"SPARSEWATCH_CONFIG": str(path)}).kafka.topic_prefix == "other"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[kafka]\nnope = 1\n", "unknown configuration key 'kafka.nope'"),
        ("[kafka]\npartition = 4\n", "key 'kafka.partition' (did you mean 'kafka.partitions'?)"),
        ("[nosuchsection]\nx = 1\n", "unknown configuration key 'nosuchsection'"),
        ("kafka = 3\n", "'kafka' must be a table"),
        (
            '[kafka]\npartitions = "4"\n',
            "'kafka.partitions' (SPARSEWATCH_KAFKA_PARTITIONS) must be int, got str",
        ),
        (
            "[detector]\ntopics = 1\n",
            "'detector.topics' (SPARSEWATCH_DETECTOR_TOPICS) must be bool, got int",
        ),
        (
            "[detector]\nmax_atoms = true\n",
            "'detector.max_atoms' (SPARSEWATCH_DETECTOR_MAX_ATOMS) must be int, got bool",
        ),
        ("data_dir = [\n", "is not valid TOML"),
    ],
)
def test_a_malformed_file_is_refused_in_one_line(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "sparsewatch.toml"
    path.write_text(body)
    with pytest.raises(SparsewatchError) as err:
        load_config(path, env={})
    assert message in str(err.value) and str(path) in str(err.value)  # the file is named


def test_an_unreadable_file_is_refused_in_one_line(tmp_path: Path) -> None:
    """A file that is not UTF-8 stopped every command with a bare UnicodeDecodeError that did not
    name the file; a folder with an IsADirectoryError."""
    path = tmp_path / "latin1.toml"
    path.write_bytes('data_dir = "Zürich"\n'.encode("latin-1"))
    with pytest.raises(SparsewatchError) as err:
        load_config(path, env={})
    assert str(err.value) == f"configuration file {path} is not UTF-8 (byte 14): TOML is UTF-8"
    with pytest.raises(SparsewatchError, match=f"^cannot read configuration file {tmp_path}: "):
        load_config(tmp_path, env={})


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "SPARSEWATCH_DETECTOR_TOPICS",
            "maybe",
            "SPARSEWATCH_DETECTOR_TOPICS='maybe' \\('detector.topics'\\) is not a valid bool",
        ),
        (
            "SPARSEWATCH_KAFKA_PARTITIONS",
            "4.5",
            "SPARSEWATCH_KAFKA_PARTITIONS='4.5' \\('kafka.partitions'\\) is not a valid int",
        ),
    ],
)
def test_a_malformed_variable_is_refused(variable: str, value: str, message: str) -> None:
    with pytest.raises(SparsewatchError, match=f"^{message}$"):
        load_config(env={variable: value})


def test_initial_atoms_reach_the_detector_model() -> None:
    config = load_config(env={"SPARSEWATCH_DETECTOR_INITIAL_ATOMS": "50"})
    assert build_models(config.detector).detector.model.n_components == 50
    assert build_models(Config().detector).detector.model.n_components == 200


def test_vocabulary_cap_and_token_length_reach_the_detector_features() -> None:
    config = load_config(
        env={
            "SPARSEWATCH_DETECTOR_MAX_VOCABULARY": "5",
            "SPARSEWATCH_DETECTOR_MAX_TOKEN_CHARS": "4",
        }
    )
    features = build_models(config.detector).detector.features
    assert (features.max_features, features.max_token_chars) == (5, 4)
    texts = ["alpha beta gamma delta epsilon", "red tan fox cat dog owl elk"]
    features.partial_fit(texts)
    # 8 distinct tokens of at most 4 characters (beta and 7 three-letter words): 5 are kept
    assert features.n_features_ == 5
    assert all(len(str(term)) <= 4 for term in features.terms_)
    default = build_models(Config().detector).detector.features
    assert (default.max_features, default.max_token_chars) == (20000, 40)
    default.partial_fit(texts)
    assert default.n_features_ == 12  # the defaults keep every one of these tokens


def test_salient_term_truncation_reaches_the_detector_features() -> None:
    text = ["alpha beta gamma delta epsilon zeta eta theta"]
    default = build_models(Config().detector).detector.features
    assert default.max_terms_per_doc is None  # 0: every term of a document is kept
    assert default.partial_fit(text).transform(text).nnz == 8
    config = load_config(env={"SPARSEWATCH_DETECTOR_MAX_TERMS_PER_DOC": "3"})
    features = build_models(config.detector).detector.features
    assert features.max_terms_per_doc == 3
    assert features.partial_fit(text).transform(text).nnz == 3


def test_emerging_per_window_reaches_the_dynamic_nmf() -> None:
    config = load_config(env={"SPARSEWATCH_DETECTOR_EMERGING_PER_WINDOW": "2"})
    assert build_models(config.detector).emerging.n_emerging == 2
    assert build_models(Config().detector).emerging.n_emerging == 3


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("SPARSEWATCH_DETECTOR_INITIAL_ATOMS", "0", ">= 1"),
        ("SPARSEWATCH_DETECTOR_MAX_ATOMS", "-3", ">= 1"),
        ("SPARSEWATCH_DETECTOR_MAX_VOCABULARY", "0", ">= 1"),
        ("SPARSEWATCH_DETECTOR_MAX_TOKEN_CHARS", "0", ">= 1"),
        ("SPARSEWATCH_DETECTOR_EMERGING_PER_WINDOW", "0", ">= 1"),
        ("SPARSEWATCH_DETECTOR_EMERGING_MIN_DOCUMENTS", "-1", ">= 0"),
        ("SPARSEWATCH_DETECTOR_NOVEL_MODE", "loudest", "'top_q' or 'threshold'"),
        ("SPARSEWATCH_DETECTOR_NOVEL_TOP_Q", "0", "in (0, 1]"),
        ("SPARSEWATCH_DETECTOR_NOVEL_THRESHOLD", "-7.0", ">= 0 (scores are >= 0)"),
        ("SPARSEWATCH_DETECTOR_TOP_TERMS", "-3", ">= 1"),
        ("SPARSEWATCH_DETECTOR_TOP_TERMS", "0", ">= 1"),
        ("SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY", "0", ">= 1"),
        ("SPARSEWATCH_ANOMALY_CONTAMINATION", "1.5", "in (0, 0.5)"),
        ("SPARSEWATCH_ANOMALY_CONTAMINATION", "0.6", "in (0, 0.5)"),  # DL-OCSVM refused it later
        ("SPARSEWATCH_LOG_LEVEL", "LOUD", "one of CRITICAL, ERROR, WARNING, INFO, DEBUG"),
        ("SPARSEWATCH_METRICS_PORT", "99999", "in 0..65535"),
        ("SPARSEWATCH_GC_THRESHOLD", "-1", "in 0..2147483647 (0: Python's default)"),
        ("SPARSEWATCH_GC_THRESHOLD", "99999999999999", "in 0..2147483647 (0: Python's default)"),
        ("SPARSEWATCH_WRITER", "bogus", "'process' or 'thread'"),
        ("SPARSEWATCH_KAFKA_PARTITIONS", "0", "in 1..2147483647"),
        ("SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS", "", "a non-empty host:port list"),
        ("SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS", "  ", "a non-empty host:port list"),
        ("SPARSEWATCH_KAFKA_GROUP_ID", "", "non-empty, at most 191 characters"),
        # "<group>.detector" keys checkpoints in VARCHAR(200): PostgreSQL refused the first one
        ("SPARSEWATCH_KAFKA_GROUP_ID", "g" * 192, "non-empty, at most 191 characters"),
        ("SPARSEWATCH_ANOMALY_REFIT_DRIFT_P", "1.0", "in [0, 1)"),
        ("SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S", "0.001", ">= 0.1"),
        ("SPARSEWATCH_WINDOWS_SIZE", "banana", _SIZE),
        ("SPARSEWATCH_WINDOWS_SIZE", "0s", _SIZE),
        ("SPARSEWATCH_WINDOWS_ALLOWED_LATENESS", "-5s", _LATENESS),
        ("SPARSEWATCH_WINDOWS_SIZE", "nanh", _SIZE),
        ("SPARSEWATCH_WINDOWS_SIZE", "1e400d", _SIZE),
        ("SPARSEWATCH_WINDOWS_SIZE", "infms", _SIZE),
        ("SPARSEWATCH_WINDOWS_SIZE", "84007d", _SIZE),
        ("SPARSEWATCH_WINDOWS_ALLOWED_LATENESS", "nans", _LATENESS),
        ("SPARSEWATCH_WINDOWS_ALLOWED_LATENESS", "1e300w", _LATENESS),
    ],
)
def test_out_of_range_values_are_refused_naming_the_option(
    variable: str, value: str, expected: str
) -> None:
    with pytest.raises(SparsewatchError) as err:
        load_config(env={variable: value})
    message = str(err.value)
    assert "\n" not in message
    assert variable in message and f"must be {expected}, got " in message
    assert message.endswith(repr(_parsed(value)))


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"SPARSEWATCH_DETECTOR_MAX_TOPICS": "3"},
            "'detector.max_topics' (SPARSEWATCH_DETECTOR_MAX_TOPICS) (3) must be at least "
            "'detector.n_topics' (SPARSEWATCH_DETECTOR_N_TOPICS) (10)",
        ),
        (
            {"SPARSEWATCH_DETECTOR_EMERGING_PER_WINDOW": "30"},
            "'detector.emerging_per_window' (SPARSEWATCH_DETECTOR_EMERGING_PER_WINDOW) (30) must "
            "be below 'detector.max_topics' (SPARSEWATCH_DETECTOR_MAX_TOPICS) (30)",
        ),
        (
            {"SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "2"},
            "'anomaly.reference_documents' (SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS) (2) must be "
            "at least 3: DL-OCSVM with 'anomaly.sparsity' (SPARSEWATCH_ANOMALY_SPARSITY) 2 needs",
        ),
        (
            {"SPARSEWATCH_ANOMALY_SPARSITY": "9", "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "9"},
            "'anomaly.reference_documents' (SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS) (9) must be "
            "at least 10",
        ),
    ],
)
def test_options_valid_alone_but_not_together_are_refused(env, expected) -> None:
    """Accepted until now: the emerging-topic model dropped its initial topics every window, or
    the anomaly worker stopped (on every restart) once the reference set filled. The message
    names each option's variable, as every other refusal does."""
    with pytest.raises(SparsewatchError) as err:
        load_config(env=env)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "variable",
    [
        "SPARSEWATCH_HEAP_FREE_LIMIT_MB",
        "SPARSEWATCH_DETECTOR_NOVEL_THRESHOLD",
        "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S",
    ],
)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_float_options_must_be_finite(variable: str, value: str, tmp_path: Path) -> None:
    """nan passes every range check and flagged nothing (novel_threshold), or stopped ``run``
    with a bare ValueError (heap_free_limit_mb)."""
    section, _, key = variable.removeprefix("SPARSEWATCH_").lower().partition("_")
    if section not in ("detector", "windows"):
        section, key = "", variable.removeprefix("SPARSEWATCH_").lower()
    option = f"{section}.{key}" if section else key
    with pytest.raises(
        SparsewatchError, match=f"^{variable}='{value}' \\('{option}'\\) is not a finite number$"
    ):
        load_config(env={variable: value})
    path = tmp_path / "sparsewatch.toml"
    line = f"{key} = {value}\n"
    path.write_text(f"[{section}]\n{line}" if section else line)
    with pytest.raises(SparsewatchError, match="must be a finite number, got "):
        load_config(path, env={})


def test_durations_up_to_the_event_time_range_are_accepted() -> None:
    day = 86_400_000
    assert parse_duration_ms("84006d") == 84006 * day  # 1970..2200, the accepted event times
    assert parse_duration_ms("12000w") == 12000 * 7 * day
    assert parse_duration_ms("1.5h") == 5_400_000
    for text in ("84006.5d", "12001w", "nanh", "-0.5s", "1e400d"):
        with pytest.raises(SparsewatchError, match="at most 84006d"):
            parse_duration_ms(text)


def _parsed(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def test_out_of_range_value_in_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sparsewatch.toml"
    path.write_text("[detector]\ninitial_atoms = 0\n")
    with pytest.raises(SparsewatchError, match=r"'detector\.initial_atoms'.*must be >= 1, got 0"):
        load_config(path, env={})


def _run_detector(variable: str, value: str) -> subprocess.CompletedProcess:
    """``sparsewatch run detector`` with ``variable=value`` in its environment (no --debug)."""
    return run_process("run", "detector", **{variable: value})


def test_cli_reports_a_bad_value_in_one_line_without_a_traceback() -> None:
    proc = _run_detector("SPARSEWATCH_DETECTOR_INITIAL_ATOMS", "0")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("error: 'detector.initial_atoms'")


@pytest.mark.parametrize(
    ("variable", "hint"),
    [
        ("SPARSEWATCH_DETECTOR_MAX_ATOM", " (did you mean SPARSEWATCH_DETECTOR_MAX_ATOMS?)"),
        ("SPARSEWATCH_WINDOW_SIZE", " (did you mean SPARSEWATCH_WINDOWS_SIZE?)"),
        ("SPARSEWATCH_KAFKA_BOOTSTRAP", " (did you mean SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS?)"),
        ("SPARSEWATCH_COLOUR_SCHEME", ""),
    ],
)
def test_an_environment_variable_that_names_no_option_is_refused(variable: str, hint: str) -> None:
    """A misspelt variable was silently ignored (a misspelt key of the file was refused): the
    worker then ran with the default the user meant to change."""
    with pytest.raises(SparsewatchError) as err:
        load_config(env={variable: "7"})
    message = str(err.value)
    assert message.startswith(f"unknown environment variable {variable}{hint}: ")
    assert "\n" not in message


def test_the_variables_that_are_not_options_are_accepted() -> None:
    env = {name: "1" for name in OTHER_ENV_NAMES if name != "SPARSEWATCH_CONFIG"}
    assert load_config(env={**env, "OTHER_PROGRAM_SETTING": "x"}) == load_config(env={})


def test_cli_reports_an_unknown_variable_in_one_line() -> None:
    proc = _run_detector("SPARSEWATCH_DETECTOR_INITAL_ATOMS", "50")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: unknown environment variable SPARSEWATCH_DETECTOR_INITAL_ATOMS (did you mean "
        "SPARSEWATCH_DETECTOR_INITIAL_ATOMS?): the README's configuration table lists every "
        "option and its variable"
    )


def test_kubernetes_service_link_variables_are_ignored() -> None:
    """A pod gets variables for every Service of its namespace: one named ``sparsewatch`` or
    ``sparsewatch-metrics`` gave SPARSEWATCH_PORT, SPARSEWATCH_METRICS_PORT=tcp://... and
    others, refused as unknown options (or an unparsable port): no command started."""
    links = {
        "SPARSEWATCH_SERVICE_HOST": "10.96.0.15",
        "SPARSEWATCH_SERVICE_PORT": "9100",
        "SPARSEWATCH_SERVICE_PORT_METRICS": "9100",
        "SPARSEWATCH_PORT": "tcp://10.96.0.15:9100",
        "SPARSEWATCH_PORT_9100_TCP": "tcp://10.96.0.15:9100",
        "SPARSEWATCH_PORT_9100_TCP_PROTO": "tcp",
        "SPARSEWATCH_PORT_9100_TCP_PORT": "9100",
        "SPARSEWATCH_PORT_9100_TCP_ADDR": "10.96.0.15",
        "SPARSEWATCH_METRICS_SERVICE_HOST": "10.96.0.16",
        "SPARSEWATCH_METRICS_PORT": "tcp://10.96.0.16:9100",
        "SPARSEWATCH_METRICS_PORT_9100_UDP": "udp://10.96.0.16:9100",
    }
    assert load_config(env=links).metrics_port == 0
    assert load_config(env={**links, "SPARSEWATCH_METRICS_PORT": "9100"}).metrics_port == 9100
    # a misspelt option is still refused, and so is a port that is not a service link
    for env in ({"SPARSEWATCH_METRICS_PROT": "9100"}, {"SPARSEWATCH_PORT": "9100"}):
        with pytest.raises(SparsewatchError, match="unknown environment variable"):
            load_config(env={**links, **env})


@pytest.mark.parametrize("variable", ["SPARSEWATCH_DATA_DIR", "SPARSEWATCH_KAFKA_TOPIC_PREFIX"])
@pytest.mark.parametrize("value", ["", "  "])
def test_blank_folder_and_topic_prefix_are_refused(variable: str, value: str) -> None:
    """``SPARSEWATCH_DATA_DIR=$UNSET`` put the database in the working directory; an empty
    prefix made the topics ``.docs``, ``.scores``, ... (blank servers and groups were refused)."""
    with pytest.raises(SparsewatchError, match=f"{variable}.* must be "):
        load_config(env={variable: value})
