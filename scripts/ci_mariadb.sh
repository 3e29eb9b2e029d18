#!/usr/bin/env bash
# Start a throwaway MariaDB server on 127.0.0.1 for the tests and print its URL on stdout.
#
#   export ZHIN_TEST_MYSQL_URL="$(bash scripts/ci_mariadb.sh)"
#
# Installs Debian's `mariadb-server` package when `mariadbd` is missing (needs root, as in CI), then runs a server
# as the `mysql` user from a fresh data folder (never the system one). The user `zhin_test` may create databases
# named zhin_*: each test makes its own and drops it. Stop it with: bash scripts/ci_mariadb.sh stop
set -euo pipefail

DATA_DIR="${ZHIN_MARIADB_DIR:-/tmp/zhin-ci-mariadb}"
PORT="${ZHIN_MARIADB_PORT:-33069}"
SOCKET="$DATA_DIR/mysqld.sock"
USER_NAME=zhin_test
PASSWORD=zhin_test

log() { echo "ci_mariadb: $*" >&2; }

if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
  log "installing Debian's mariadb-server package"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq mariadb-server >&2
fi
PATH="$PATH:/usr/sbin"

client() { mariadb --protocol=socket -S "$SOCKET" -u root "$@"; }

if [ "${1:-}" = "stop" ]; then
  [ -f "$DATA_DIR/mysqld.pid" ] && kill "$(cat "$DATA_DIR/mysqld.pid")" 2>/dev/null || true
  exit 0
fi

if ! client -e "SELECT 1" >/dev/null 2>&1; then
  rm -rf "$DATA_DIR"
  mkdir -p "$DATA_DIR"
  chown mysql:mysql "$DATA_DIR" 2>/dev/null || true
  mariadb-install-db --user=mysql --datadir="$DATA_DIR/data" --auth-root-authentication-method=socket \
    --skip-test-db >"$DATA_DIR/install.log" 2>&1 || { cat "$DATA_DIR/install.log" >&2; exit 1; }
  # setsid + nohup: the server outlives this script; CI ends it with everything else the run started
  setsid nohup mariadbd --no-defaults --user=mysql --datadir="$DATA_DIR/data" --socket="$SOCKET" \
    --pid-file="$DATA_DIR/mysqld.pid" --port="$PORT" --bind-address=127.0.0.1 --skip-name-resolve \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_bin --innodb-flush-log-at-trx-commit=0 \
    --log-error="$DATA_DIR/server.log" >/dev/null 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    client -e "SELECT 1" >/dev/null 2>&1 && break
    sleep 1
  done
  client -e "SELECT 1" >/dev/null 2>&1 || { log "server did not start"; cat "$DATA_DIR/server.log" >&2; exit 1; }
fi

client <<SQL
CREATE USER IF NOT EXISTS '$USER_NAME'@'127.0.0.1' IDENTIFIED BY '$PASSWORD';
GRANT ALL PRIVILEGES ON \`zhin\\_%\`.* TO '$USER_NAME'@'127.0.0.1';
CREATE DATABASE IF NOT EXISTS zhin_test;
SQL

echo "mysql://$USER_NAME:$PASSWORD@127.0.0.1:$PORT/zhin_test"
