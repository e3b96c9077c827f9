#!/usr/bin/env bash
# Start (or stop) the real services the test suite and the demo use, without Docker:
# a throw-away PostgreSQL cluster from Debian's packages and the local Kafka broker.
#   source scripts/services.sh; services_up; ...; services_down
# services_up exports KAFKA_BOOTSTRAP_SERVERS and SPARSEWATCH_TEST_DATABASE_URL and fails (never
# skips) when either service cannot be started.

source "$(dirname "${BASH_SOURCE[0]}")/java_maven.sh"

SW_SERVICES_DIR="${SW_SERVICES_DIR:-$(mktemp -d /tmp/sparsewatch-services.XXXXXX)}"
SW_PG_PORT="${SW_PG_PORT:-55432}"

_pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  return 1
}

postgres_up() {
  # Each step's failure returns (set -e does not apply inside a function called left of &&):
  # a cluster that did not start (its port taken) no longer passed for one that did, the
  # connection check then reaching whichever server held the port.
  local bin
  if ! bin=$(_pg_bin); then
    echo "== installing PostgreSQL from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null \
      || { echo "error: could not install PostgreSQL (apt-get)" >&2; return 1; }
    bin=$(_pg_bin) || { echo "error: no pg_ctl after installing PostgreSQL" >&2; return 1; }
  fi
  local data="$SW_SERVICES_DIR/pg" run_as=()
  mkdir -p "$data" || return 1
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home "$SW_SERVICES_DIR" postgres
    chown -R postgres "$SW_SERVICES_DIR"
    chmod 755 "$SW_SERVICES_DIR"
    run_as=(runuser -u postgres --)
  fi
  if [ ! -f "$data/PG_VERSION" ]; then  # a cluster from an earlier postgres_up is reused
    # C.UTF-8 whatever the caller's locale: under the C locale (env -i, no LANG) PostgreSQL
    # lower-cases ASCII only, and case-insensitive search missed "Zürich" for "ZÜRICH"
    "${run_as[@]}" "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
      >/dev/null || { echo "error: initdb failed in $data" >&2; return 1; }
  fi
  if ! "${run_as[@]}" "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    "${run_as[@]}" "$bin/pg_ctl" -D "$data" -l "$SW_SERVICES_DIR/pg.log" -w -t 60 \
      -o "-p $SW_PG_PORT -k $SW_SERVICES_DIR -c listen_addresses=127.0.0.1 -c fsync=off" \
      start >/dev/null || {
      echo "error: PostgreSQL did not start on port $SW_PG_PORT ($SW_SERVICES_DIR/pg.log):" >&2
      tail -n 3 "$SW_SERVICES_DIR/pg.log" >&2
      return 1
    }
  fi
  export SPARSEWATCH_TEST_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:$SW_PG_PORT/postgres"
  python3 - <<'PY'
import os, sqlalchemy as sa
with sa.create_engine(os.environ["SPARSEWATCH_TEST_DATABASE_URL"]).connect() as c:
    print("== PostgreSQL", c.execute(sa.text("show server_version")).scalar(), "is up")
PY
}

postgres_down() {
  local bin
  bin=$(_pg_bin) || return 0
  [ -f "$SW_SERVICES_DIR/pg/postmaster.pid" ] || return 0
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$bin/pg_ctl" -D "$SW_SERVICES_DIR/pg" -m fast stop >/dev/null || true
  else
    "$bin/pg_ctl" -D "$SW_SERVICES_DIR/pg" -m fast stop >/dev/null || true
  fi
}

kafka_up() {
  # (a failed start printed "Kafka is up at " and returned 0)
  local bootstrap
  java_and_maven || return 1
  bootstrap=$(sparsewatch kafka up --port 0 --run-dir "$SW_SERVICES_DIR/kafka") || return 1
  export KAFKA_BOOTSTRAP_SERVERS="$bootstrap"
  echo "== Kafka is up at $KAFKA_BOOTSTRAP_SERVERS"
}

kafka_down() {
  sparsewatch kafka down --run-dir "$SW_SERVICES_DIR/kafka" >/dev/null 2>&1 || true
}

services_up() { postgres_up && kafka_up; }
services_down() { kafka_down; postgres_down; }
