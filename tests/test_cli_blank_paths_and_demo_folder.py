"""The operations CLI: a blank ``--config``, ``--run-dir``
or ``--out`` that silently meant the default (``--config ""``: the environment's file), and two
demos sharing one output folder, where the second deleted the first's database and the first
printed the second's results. Real broker, real SQLite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import clean_environ, run_cli


def _usage_error(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    **settings: str,
) -> str:
    """``sparsewatch ARGS`` with no ``SPARSEWATCH_*`` variable but ``settings``: a usage error
    (status 2) of one line, which is returned."""
    for name in [n for n in os.environ if n.startswith("SPARSEWATCH_")]:
        monkeypatch.delenv(name)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_config_path_is_a_usage_error_not_the_environments_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], blank: str
) -> None:
    """``sparsewatch --config "$UNSET" run all`` ran with the defaults, and with
    ``SPARSEWATCH_CONFIG`` set it loaded that file instead (the command line lost to the
    environment); a blank name is refused elsewhere rather than meaning the default."""
    env_file = tmp_path / "env.toml"
    env_file.write_text("[anomaly]\nenabled = false\n", encoding="utf-8")
    line = _usage_error(
        monkeypatch,
        capsys,
        ["--config", blank, "run", "anomaly"],
        SPARSEWATCH_CONFIG=str(env_file),
        SPARSEWATCH_DATA_DIR=str(tmp_path),
    )
    assert "--config" in line and "blank" in line, line


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["kafka", "status", "--run-dir", ""], "--run-dir"),
        (["kafka", "down", "--run-dir", " "], "--run-dir"),
        (["demo", "--out", ""], "--out"),
    ],
)
def test_a_blank_folder_is_a_usage_error_not_the_default_one(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    option: str,
) -> None:
    """``kafka status --run-dir ""`` reported the broker of ``DATA_DIR/kafka`` (``down``
    stopped it) and ``demo --out ""`` wrote into ``DATA_DIR/demo``, as if no folder were given."""
    line = _usage_error(
        monkeypatch,
        capsys,
        args,
        SPARSEWATCH_DATA_DIR=str(tmp_path),
        SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9",
    )
    assert option in line and "blank" in line, line
    assert not (tmp_path / "kafka").exists() and not (tmp_path / "demo").exists()


def test_a_second_demo_in_the_same_folder_is_refused_while_the_first_runs(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The second demo deleted the first's database (``DATA_DIR/demo/demo.db``) and made its
    own there: the first, replaying 700 documents, then stored part of them in a deleted file
    and printed "600 documents stored" and the alerts of the second's 600."""
    env = clean_environ(
        SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        SPARSEWATCH_DATA_DIR=str(tmp_path),
        SPARSEWATCH_ANOMALY_ENABLED="false",
    )
    demo = [sys.executable, "-m", "sparsewatch", "demo"]
    first = subprocess.Popen(
        [*demo, "--documents", "700"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None
        assert first.stdout.readline().startswith("replaying 700 "), first.stderr
        second = subprocess.run(
            [*demo, "--documents", "600"], env=env, capture_output=True, text=True, timeout=300
        )
        out, err = first.communicate(timeout=300)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert "\n700 documents stored" in out, out
    assert second.returncode == 2, second.stdout + second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), second.stderr
    assert "another demo" in lines[0] and str(tmp_path / "demo") in lines[0], lines[0]
    assert "--out" in lines[0], lines[0]
    # The folder is free again once the first has ended.
    third = subprocess.run(
        [*demo, "--documents", "500"], env=env, capture_output=True, text=True, timeout=300
    )
    assert third.returncode == 0, third.stderr
    assert "\n500 documents stored" in third.stdout, third.stdout
