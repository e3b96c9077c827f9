"""PostgreSQL without its driver (``pip install sparsewatch`` without the ``postgres`` extra,
as docker-compose.yml's comment led a user to): one line naming the extra, not
``error: ModuleNotFoundError: No module named 'psycopg'``."""

from __future__ import annotations

import subprocess
import sys

from tests.support.cli import clean_environ

# psycopg hidden from the interpreter, then the command line of argv[1:]
WITHOUT_PSYCOPG = """
import importlib.abc, sys
class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "psycopg":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hidden())
sys.argv = ["sparsewatch", *sys.argv[1:]]
from sparsewatch.cli import main
main()
"""


def test_a_postgresql_url_without_the_driver_names_the_extra() -> None:
    url = "postgresql://sparsewatch@127.0.0.1:1/sparsewatch"
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG, "alerts", "--database-url", url],
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "error: PostgreSQL needs the psycopg driver, an extra of sparsewatch: "
        "pip install 'sparsewatch[postgres]'"
    ]
