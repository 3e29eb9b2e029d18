#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on 127.0.0.1 for the tests and print its URL on stdout.
#
#   export ZHIN_TEST_POSTGRES_URL="$(bash scripts/ci_postgres.sh)"
#
# Installs Debian's `postgresql` package when no server binaries are found (needs root, as in CI), then runs
# initdb/pg_ctl as the `postgres` user (initdb refuses root) in a fresh folder, so it never touches the
# Debian `main` cluster. The role `zhin_test` may create databases: each test makes its own and drops it.
# Stop it with: bash scripts/ci_postgres.sh stop
set -euo pipefail

DATA_DIR="${ZHIN_PG_DIR:-/tmp/zhin-ci-postgres}"
PORT="${ZHIN_PG_PORT:-54329}"
ROLE=zhin_test
PASSWORD=zhin_test

log() { echo "ci_postgres: $*" >&2; }

find_bin() {
  local found
  found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$found" ] && [ -x "$found/initdb" ] && echo "$found"
}

BIN="$(find_bin || true)"
if [ -z "$BIN" ]; then
  log "installing Debian's postgresql package"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq postgresql >&2
  BIN="$(find_bin)"
fi

as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

if [ "${1:-}" = "stop" ]; then
  as_postgres "$BIN/pg_ctl" -D "$DATA_DIR/data" -m fast stop >&2 || true
  exit 0
fi

if ! as_postgres "$BIN/pg_ctl" -D "$DATA_DIR/data" status >/dev/null 2>&1; then
  rm -rf "$DATA_DIR"
  mkdir -p "$DATA_DIR"
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$DATA_DIR"
  as_postgres "$BIN/initdb" -D "$DATA_DIR/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 >&2
  as_postgres "$BIN/pg_ctl" -D "$DATA_DIR/data" -l "$DATA_DIR/server.log" -w \
    -o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$DATA_DIR -c fsync=off" start >&2
fi

as_postgres "$BIN/psql" -h "$DATA_DIR" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -q >&2 <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
    CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
  END IF;
END \$\$;
SQL
if ! as_postgres "$BIN/psql" -h "$DATA_DIR" -p "$PORT" -U postgres -d postgres -tAc \
  "SELECT 1 FROM pg_database WHERE datname = '$ROLE'" | grep -q 1; then
  as_postgres "$BIN/createdb" -h "$DATA_DIR" -p "$PORT" -U postgres -O "$ROLE" "$ROLE" >&2
fi

echo "postgresql://$ROLE:$PASSWORD@127.0.0.1:$PORT/$ROLE"
