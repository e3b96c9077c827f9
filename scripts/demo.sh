#!/usr/bin/env bash
# The main job end to end on a fresh machine: install, then `sparsewatch demo` (starts the local
# Kafka broker when none answers, replays a generated stream through both workers, prints the top
# alerts and emerging topics from the database, and writes a PNG of novelty scores over time).
# Paths in the arguments and the configuration are relative to where it is run from.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/scripts/python_env.sh"
installable_python "$root"
# Installed once per pyproject.toml and interpreter (a stamp in the git-ignored data/ folder),
# again when sparsewatch is not importable from this checkout: a second run starts at once, and
# its bad options are told without waiting for pip.
stamp="$root/data/.demo-installed"
want="$(python3 - "$root/pyproject.toml" <<'PY'
import hashlib, sys
print(sys.executable, hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())
PY
)"
installed_here() {
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && command -v sparsewatch >/dev/null \
    && python3 - "$root" 2>/dev/null <<'PY'
import os, sys
import sparsewatch.cli
here = os.path.dirname(os.path.dirname(os.path.realpath(sparsewatch.cli.__file__)))
sys.exit(here != os.path.realpath(sys.argv[1]))
PY
}
if ! installed_here; then
  (cd "$root" && PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q \
    --disable-pip-version-check -e .)
  mkdir -p "$root/data" && printf '%s\n' "$want" > "$stamp"
fi
# A broker given as the test fixtures and scripts/services.sh give it is the demo's broker too.
if [ -z "${SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS:-}" ] && [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  export SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS="$KAFKA_BOOTSTRAP_SERVERS"
fi
# Without a configured broker the demo starts the local one, which needs Java and Maven; a failed
# install is not fatal here (a broker may answer at the default address: the demo says what it
# needs when it finds none).
if [ -z "${SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  source "$root/scripts/java_maven.sh"
  java_and_maven || true
fi
exec sparsewatch demo "$@"
