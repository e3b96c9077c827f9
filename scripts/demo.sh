#!/usr/bin/env bash
# The main job end to end on a fresh machine: install, then `sparsewatch demo` (starts the local
# Kafka broker when none answers, replays a generated stream through both workers, prints the top
# alerts and emerging topics from the database, and writes a PNG of novelty scores over time).
# Paths in the arguments and the configuration are relative to where it is run from.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
(cd "$root" && python3 -m pip install -q --disable-pip-version-check -e .)
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
