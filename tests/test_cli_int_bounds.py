"""Integer options and settings have a maximum, refused when parsed or loaded with one line naming
the option. Without one, ``evaluate --step 2**63`` failed with "OverflowError: Python int too large
to convert to C long" and ``--docs 10**20`` with "ValueError: Maximum allowed dimension exceeded";
``anomaly.n_atoms = 10**20`` loaded and the anomaly worker stopped at its first fit; a huge count of
the replay, the queries or the configuration was accepted although nothing can count that far."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import get_type_hints

import pytest

from sparsewatch.cli import main
from sparsewatch.config import MAX_INT64, MAX_MODEL_RANK, Config, load_config
from sparsewatch.errors import SparsewatchError

BEYOND_INT64 = str(MAX_INT64 + 1)
HUGE = str(10**20)
# a corpus too short for the default warm-up: an option the parser let through ends in an error
# naming the warm-up at once, instead of a whole evaluation
EVALUATE = ["evaluate", "--docs", "2", "--methods", "nn-exact"]
REPLAY = ["replay", "{corpus}", "--bootstrap-servers", "127.0.0.1:9", "--connect-timeout", "1"]


def _run(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path, *args: str) -> tuple[int, str]:
    """Exit status and stderr of ``sparsewatch ARGS`` (the console entry point)."""
    monkeypatch.setenv("SPARSEWATCH_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["sparsewatch", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    return exc.value.code, capsys.readouterr().err


def _corpus(tmp_path: Path) -> str:
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "hello", "timestamp": 0}\n', encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ([*EVALUATE, "--step", BEYOND_INT64], "--step"),
        ([*EVALUATE, "--step", HUGE], "--step"),
        ([*EVALUATE, "--warmup", BEYOND_INT64], "--warmup"),
        ([*EVALUATE, "--max-steps", BEYOND_INT64], "--max-steps"),
        ([*EVALUATE, "--seed", BEYOND_INT64], "--seed"),
        (["evaluate", "--docs", HUGE], "--docs"),
        (["evaluate", "--docs", BEYOND_INT64], "--docs"),
        (["evaluate", "--docs", "10000001"], "--docs"),  # generated in memory, ~1.4 kB each
        ([*REPLAY, "--skip", BEYOND_INT64], "--skip"),
        ([*REPLAY, "--limit", BEYOND_INT64], "--limit"),
        ([*REPLAY, "--chunk-size", BEYOND_INT64], "--chunk-size"),
        (["topics", "--database-url", "sqlite:///{db}", "--terms", BEYOND_INT64], "--terms"),
        (
            ["db", "prune", "--database-url", "sqlite:///{db}", "--keep-windows", BEYOND_INT64],
            "--keep-windows",
        ),
        (
            ["db", "prune", "--database-url", "sqlite:///{db}", "--keep-snapshots", BEYOND_INT64],
            "--keep-snapshots",
        ),
        (["demo", "--documents", HUGE], "--documents"),
        (["demo", "--documents", "200001"], "--documents"),  # held in memory, ~1 kB each
        (["demo", "--top", BEYOND_INT64], "--top"),
    ],
)
def test_an_integer_option_beyond_its_maximum_is_a_one_line_usage_error(
    args: list[str], option: str, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path
) -> None:
    args = [a.format(corpus=_corpus(tmp_path), db=tmp_path / "none.db") for a in args]
    code, err = _run(monkeypatch, capsys, tmp_path, *args)
    assert code == 2
    assert err.startswith("error: Invalid value for ") and err.count("\n") == 1, err
    assert f"'{option}'" in err and "is not in the range" in err


def test_the_largest_counts_are_valid(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path) -> None:
    """The maximum itself is accepted: here the error is the warm-up's, after parsing."""
    top = str(MAX_INT64)
    for option in ("--step", "--max-steps", "--seed"):
        code, err = _run(monkeypatch, capsys, tmp_path, *EVALUATE, option, top)
        assert code == 2 and "need more than the warm-up" in err, err


SECTIONS = ("kafka", "windows", "detector", "anomaly")
RANKS = [
    "detector.n_topics",
    "detector.max_topics",
    "detector.emerging_per_window",
    "anomaly.n_atoms",
]


def _int_settings() -> list[str]:
    """The TOML key of every integer setting."""
    config = Config()
    keys = []
    for prefix, obj in [("", config)] + [(f"{s}.", getattr(config, s)) for s in SECTIONS]:
        hints = get_type_hints(type(obj))
        keys += [prefix + f.name for f in dataclasses.fields(obj) if hints[f.name] is int]
    return keys


def _variable(key: str) -> str:
    return "SPARSEWATCH_" + key.replace(".", "_").upper()


def _refused(env: dict[str, str], key: str) -> str:
    with pytest.raises(SparsewatchError) as err:
        load_config(env=env)
    message = str(err.value)
    assert "\n" not in message
    assert f"'{key}'" in message and _variable(key) in message, message
    return message


@pytest.mark.parametrize("key", _int_settings())
@pytest.mark.parametrize("value", [BEYOND_INT64, HUGE])
def test_an_integer_setting_beyond_its_maximum_is_refused_when_loaded(key: str, value: str) -> None:
    message = _refused({_variable(key): value}, key)
    assert message.endswith(f"got {value}")


@pytest.mark.parametrize("key", RANKS)
def test_a_model_dimension_beyond_its_maximum_is_refused_when_loaded(key: str) -> None:
    # MOR-NMF or DL-OCSVM of rank 100,000 failed allocating 75 GiB at their first fit
    message = _refused({_variable(key): str(MAX_MODEL_RANK + 1)}, key)
    assert f"must be at most {MAX_MODEL_RANK} " in message


def test_the_largest_values_load() -> None:
    env = {_variable(key): str(MAX_INT64) for key in _int_settings() if key not in RANKS}
    for key in ("metrics_port", "blas_threads", "gc_threshold", "kafka.partitions"):
        del env[_variable(key)]  # bounded on both sides, below MAX_INT64
    env |= {_variable(key): str(MAX_MODEL_RANK) for key in RANKS}
    env["SPARSEWATCH_ANOMALY_SPARSITY"] = str(MAX_INT64 - 1)  # reference_documents >= sparsity + 1
    env["SPARSEWATCH_DETECTOR_EMERGING_PER_WINDOW"] = str(MAX_MODEL_RANK - 1)  # below max_topics
    config = load_config(env=env)
    assert config.windows.count == MAX_INT64 and config.anomaly.n_atoms == MAX_MODEL_RANK


def test_a_huge_integer_in_the_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "sparsewatch.toml"
    path.write_text(f"[windows]\ncount = {HUGE}\n")
    with pytest.raises(SparsewatchError, match=r"'windows\.count' \(SPARSEWATCH_WINDOWS_COUNT\)"):
        load_config(path, env={})


def test_a_command_refuses_a_huge_setting_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path
) -> None:
    # before, the anomaly worker stopped at its first fit: "error: OverflowError: Python int too
    # large to convert to C long" (here the warm-up's error came first)
    monkeypatch.setenv("SPARSEWATCH_ANOMALY_N_ATOMS", HUGE)
    code, err = _run(monkeypatch, capsys, tmp_path, *EVALUATE)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: 'anomaly.n_atoms' (SPARSEWATCH_ANOMALY_N_ATOMS) must be at most")
