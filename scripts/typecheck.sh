#!/usr/bin/env bash
# Type-check the installed package with mypy (configuration: [tool.mypy] in pyproject.toml).
# The distribution maps its top-level folders (models/, consumers/, ...) to sparsewatch.<folder>
# ([tool.setuptools] package-dir), which mypy cannot follow through the editable install: this
# script lays the package out as it is installed, as symbolic links in a temporary folder, and
# checks it there. Usage: bash scripts/typecheck.sh [mypy options]
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
python3 - "$root" "$tree" <<'PY'
import os, sys, tomllib
from pathlib import Path

root, tree = Path(sys.argv[1]), Path(sys.argv[2])
package_dir = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
# The top package first, then its sub-packages inside it.
for name, folder in sorted(package_dir.items(), key=lambda item: item[0].count(".")):
    target = tree.joinpath(*name.split("."))
    if name.count(".") == 0:
        target.mkdir(parents=True)
        for entry in (root / folder).iterdir():
            os.symlink(entry, target / entry.name)
    else:
        os.symlink(root / folder, target)
PY
cd "$tree"
python3 -m mypy --config-file "$root/pyproject.toml" -p sparsewatch "$@"
