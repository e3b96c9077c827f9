"""The ``sparsewatch`` command line run in-process (status, stdout, stderr), as tests call it, or
in a child process, and the environment of one without this process's settings."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sparsewatch.cli import main


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``sparsewatch ARGS``: exit status, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["sparsewatch", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def run_replay(monkeypatch, capsys, topic: str, bootstrap: str, *args: str) -> tuple[int, str, str]:
    """``sparsewatch replay ARGS --topic TOPIC --bootstrap-servers BOOTSTRAP``."""
    return run_cli(
        monkeypatch, capsys, "replay", *args, "--topic", topic, "--bootstrap-servers", bootstrap
    )


def run_process(
    *args: str, timeout: float = 120, **settings: str
) -> subprocess.CompletedProcess[str]:
    """``sparsewatch ARGS`` in a child process, ``settings`` over this process's environment
    (without ``SPARSEWATCH_DEBUG``: no traceback); its status, stdout and stderr."""
    env = {k: v for k, v in os.environ.items() if k != "SPARSEWATCH_DEBUG"} | settings
    return subprocess.run(
        [sys.executable, "-m", "sparsewatch", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def clean_environ(**settings: str) -> dict[str, str]:
    """This process's environment without any ``SPARSEWATCH_*`` setting, and ``settings``."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SPARSEWATCH_")} | settings


def limit_note(n: int, what: str) -> str:
    """What a listing cut by ``--limit n`` says on stderr."""
    return f"note: {n} {what} shown, more match: raise --limit\n"
