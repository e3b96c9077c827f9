"""The ``sparsewatch`` command line run in-process (status, stdout, stderr), as tests call it."""

from __future__ import annotations

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
