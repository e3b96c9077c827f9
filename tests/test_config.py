"""Configuration: file and environment applied, out-of-range values refused with one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sparsewatch.consumers.detector_core import build_models

from sparsewatch.config import Config, describe, load_config, parse_duration_ms
from sparsewatch.errors import SparsewatchError

_SIZE = "a positive duration of at most 84006d (500ms, 30s, 15m, 1h, 2d)"
_LATENESS = "a duration of at most 84006d (0s, 30s, 15m, ...)"


def test_defaults_load_and_every_option_is_described() -> None:
    config = load_config(env={})
    assert config == Config()
    rows = {key: env for key, env, _ in describe()}
    assert rows["detector.initial_atoms"] == "SPARSEWATCH_DETECTOR_INITIAL_ATOMS"


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
    features.partial_fit(["alpha beta gamma delta epsilon", "one two six ten red tan"])
    assert features.n_features_ <= 5
    assert all(len(str(term)) <= 4 for term in features.terms_)
    default = build_models(Config().detector).detector.features
    assert (default.max_features, default.max_token_chars) == (20000, 40)


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
        ("SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY", "0", ">= 1"),
        ("SPARSEWATCH_ANOMALY_CONTAMINATION", "1.5", "in (0, 1)"),
        ("SPARSEWATCH_LOG_LEVEL", "LOUD", "one of CRITICAL, ERROR, WARNING, INFO, DEBUG"),
        ("SPARSEWATCH_METRICS_PORT", "99999", "in 0..65535"),
        ("SPARSEWATCH_GC_THRESHOLD", "-1", "in 0..2147483647 (0: Python's default)"),
        ("SPARSEWATCH_GC_THRESHOLD", "99999999999999", "in 0..2147483647 (0: Python's default)"),
        ("SPARSEWATCH_WRITER", "bogus", "'process' or 'thread'"),
        ("SPARSEWATCH_KAFKA_PARTITIONS", "0", ">= 1"),
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
    with pytest.raises(SparsewatchError, match=f"^{variable}='{value}' is not a finite number$"):
        load_config(env={variable: value})
    section, _, key = variable.removeprefix("SPARSEWATCH_").lower().partition("_")
    if section not in ("detector", "windows"):
        section, key = "", variable.removeprefix("SPARSEWATCH_").lower()
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


def test_cli_reports_a_bad_value_in_one_line_without_a_traceback() -> None:
    env = {**os.environ, "SPARSEWATCH_DETECTOR_INITIAL_ATOMS": "0"}
    env.pop("SPARSEWATCH_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "sparsewatch", "run", "detector"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("error: 'detector.initial_atoms'")
