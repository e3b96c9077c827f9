"""Startup as operators meet it: the broker's jar cache where an operator points it (a relative
folder, ``~``) or after it was damaged, a configuration file saved with a byte-order mark, and
the demo's emerging-topic alerts naming the window its printed `documents` hint asks for. Real
Maven (from its local repository), real broker, no mocks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparsewatch.cli import cli
from sparsewatch.config import load_config
from sparsewatch.kafka_local import (
    KAFKA_VERSION,
    SCALA_VERSION,
    default_cache_dir,
    fetch_broker_jars,
)

_FOLDER = f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}"
_MAIN_JAR = f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar"


def _fetch_in(cwd: Path, cache_dir: str) -> subprocess.CompletedProcess[str]:
    """``sparsewatch kafka fetch`` run from ``cwd`` with ``SPARSEWATCH_CACHE_DIR=cache_dir``."""
    code = "from sparsewatch.cli import main; main()"
    env = {"PATH": _path(), "HOME": str(Path.home()), "SPARSEWATCH_CACHE_DIR": cache_dir}
    return subprocess.run(
        [sys.executable, "-c", code, "kafka", "fetch"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _path() -> str:
    return os.environ.get("PATH", "")


def test_a_relative_cache_folder_is_the_working_directorys(tmp_path: Path) -> None:
    """Maven reads a relative ``-DoutputDirectory`` from the pom's folder: with
    ``SPARSEWATCH_CACHE_DIR=rcache`` the jars went to ``rcache/kafka_.../rcache/kafka_.../
    libs.partial`` and the fetch failed with "could not fetch Kafka ... from Maven Central: no
    jars" on every try."""
    proc = _fetch_in(tmp_path, "rcache")
    assert proc.returncode == 0, proc.stderr
    libs = tmp_path / "rcache" / _FOLDER / "libs"
    assert Path(proc.stdout.strip()) == libs
    assert (libs / _MAIN_JAR).is_file()
    assert not (tmp_path / "rcache" / _FOLDER / "rcache").exists()


def test_a_cache_folder_under_home_is_expanded(tmp_path: Path, monkeypatch) -> None:
    """``SPARSEWATCH_CACHE_DIR="~/x"`` (quoted, so the shell left it) made a folder named ``~``."""
    repo = Path.home() / ".m2" / "repository"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPARSEWATCH_CACHE_DIR", "~/swcache")
    monkeypatch.chdir(tmp_path)
    # Maven's local repository stays the real one (offline copies, no download)
    monkeypatch.setenv("MAVEN_OPTS", f"-Dmaven.repo.local={repo}")
    libs = fetch_broker_jars(default_cache_dir())
    assert libs == tmp_path / "home" / "swcache" / _FOLDER / "libs"
    assert (libs / _MAIN_JAR).is_file()
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_damaged_jar_in_a_complete_cache_is_fetched_again(tmp_path: Path, damage: str) -> None:
    """A cache marked complete was trusted as it was: a jar truncated or deleted since (a full
    disk, a clean-up) stopped every ``kafka up`` with "formatting Kafka storage failed: Could not
    find or load main class kafka.tools.StorageTool", naming neither the jar nor the cache, and
    ``kafka fetch`` returned at once without repairing it."""
    cache = tmp_path / "cache"
    libs = fetch_broker_jars(cache)
    assert (cache / _FOLDER / ".complete").exists()
    jar = libs / _MAIN_JAR
    size = jar.stat().st_size
    if damage == "truncated":
        with jar.open("r+b") as fh:
            fh.truncate(size // 3)
        assert not zipfile.is_zipfile(jar)
    else:
        jar.unlink()
    assert fetch_broker_jars(cache) == libs
    assert jar.stat().st_size == size
    assert all(zipfile.is_zipfile(j) for j in libs.glob("*.jar"))


def test_a_damaged_jar_in_mavens_repository_is_a_clear_error(tmp_path: Path) -> None:
    """Maven copies what its local repository holds without checking it again: a damaged copy
    there is named, with what to do, instead of a class the JVM cannot load."""
    repo = tmp_path / "m2"
    real = Path.home() / ".m2" / "repository"
    shutil.copytree(real, repo, symlinks=True)
    damaged = (
        repo / "org" / "apache" / "kafka" / f"kafka_{SCALA_VERSION}" / KAFKA_VERSION / _MAIN_JAR
    )
    with damaged.open("r+b") as fh:
        fh.truncate(1000)
    code = "from sparsewatch.cli import main; main()"
    env = {
        "PATH": _path(),
        "HOME": str(Path.home()),
        "SPARSEWATCH_CACHE_DIR": str(tmp_path / "cache"),
        "MAVEN_OPTS": f"-Dmaven.repo.local={repo}",
    }
    proc = subprocess.run(
        [sys.executable, "-c", code, "kafka", "fetch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "damaged" in lines[0] and _MAIN_JAR in lines[0] and ".m2" in lines[0]
    assert not (tmp_path / "cache" / _FOLDER / ".complete").exists()


def test_a_configuration_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Windows editors save UTF-8 with a byte-order mark: TOML's parser refused such a file as
    "Invalid statement (at line 1, column 1)" of a line that looked right."""
    path = tmp_path / "sw.toml"
    path.write_bytes(b'\xef\xbb\xbf[kafka]\npartitions = 7\ntopic_prefix = "caf\xc3\xa9s"\n')
    with pytest.raises(Exception, match="topic_prefix"):  # the file's values are applied
        load_config(path, env={})
    path.write_bytes(b"\xef\xbb\xbf[kafka]\npartitions = 7\n")
    assert load_config(path, env={}).kafka.partitions == 7
    # a byte that is not UTF-8 is still told by its position in the file, the mark counted
    path.write_bytes(b'\xef\xbb\xbfdata_dir = "\xff"\n')
    with pytest.raises(Exception, match=r"is not UTF-8 \(byte 16\)"):
        load_config(path, env={})


def test_the_demo_names_the_window_of_each_emerging_topic(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The demo ends with "documents of emerging topic topic-ID of window W: sparsewatch documents
    --window W --topic ID", but its emerging-topic alerts printed the topic and never the
    window."""
    env = {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "SPARSEWATCH_DATA_DIR": str(tmp_path),
        "SPARSEWATCH_ANOMALY_ENABLED": "false",
    }
    result = CliRunner().invoke(cli, ["demo", "--documents", "2000", "--top", "3"], env=env)
    assert result.exit_code == 0, result.output
    section = result.output.split("== top emerging_topic alerts", 1)[1].split("\n== ", 1)[0]
    shown = re.findall(r"^ +[0-9.]+ +topic-(\d+) window (\d+) ", section, flags=re.M)
    assert shown, result.output
    url = re.search(r"^database: (\S+)$", result.output, flags=re.M).group(1)
    topic, window = shown[0]
    listed = CliRunner().invoke(
        cli,
        [
            "documents",
            "--database-url",
            url,
            "--window",
            window,
            "--topic",
            topic,
            "--format",
            "json",
        ],
        env=env,
    )
    assert listed.exit_code == 0, listed.output
    assert listed.output.count('"doc_id"') >= 1
