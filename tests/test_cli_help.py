"""Every command's ``--help`` renders, and shows no placeholder of an unset bound or default."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from sparsewatch.cli import cli


def _command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for name, command in sorted(group.commands.items()):
        paths.append((*prefix, name))
        if isinstance(command, click.Group):
            paths.extend(_command_paths(command, (*prefix, name)))
    return paths


COMMANDS = _command_paths(cli)


def test_the_cli_has_its_commands() -> None:
    names = {path[0] for path in COMMANDS}
    assert {"alerts", "documents", "evaluate", "replay", "run", "snapshots", "topics"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_renders_without_placeholders(path: tuple[str, ...]) -> None:
    """``--min-score`` showed ``[x<=None]`` (a range type without bounds)."""
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert "None" not in result.output


GROUPS = [()] + [(name,) for name, cmd in cli.commands.items() if isinstance(cmd, click.Group)]


@pytest.mark.parametrize("path", GROUPS, ids=lambda path: " ".join(("sparsewatch", *path)))
def test_a_group_without_its_command_prints_its_help(path: tuple[str, ...]) -> None:
    """``sparsewatch db`` printed the whole help inside an error line: "error: Usage: ...
    (see 'sparsewatch db --help')"."""
    env = {**os.environ}
    env.pop("SPARSEWATCH_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "sparsewatch", *path],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    first = proc.stderr.splitlines()[0]
    assert first.startswith("Usage: ") and first.endswith(
        f"{' '.join(('sparsewatch', *path))} [OPTIONS] COMMAND [ARGS]..."
    )
    assert "error" not in proc.stderr and "--help')" not in proc.stderr
    group = cli.commands[path[0]] if path else cli
    assert all(name in proc.stderr for name in group.commands)
