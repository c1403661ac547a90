#!/usr/bin/env bash
# postgres.sh runs a throwaway PostgreSQL server (Debian's `postgresql` package) for
# the end-to-end scenario of datastore.type external (e2e/external_test.go). It is
# its own instance in its own directory, never the distribution's cluster, and it
# listens only on the address given (the host cluster node's own IP, which pods
# reach), with password logins allowed from loopback and the CIDR given (the pod
# network). See docs/e2e.md.
#
# usage: hack/postgres.sh up ADDRESS CIDR   (re)start it; prints the port
#        hack/postgres.sh down              stop it and remove its data
#        hack/postgres.sh stop              stop it, keep the data (the "database down" fault)
#        hack/postgres.sh start             start it again on the same data
#
# env:   PG_DIR       where it lives (default $HOSTCLUSTER_DIR/postgres, /tmp/k3k-hostcluster/postgres)
#        PG_PORT      port (default 15432, so a system PostgreSQL on 5432 is left alone)
#        PG_USER, PG_PASSWORD, PG_DATABASE   the role and database made for k3s
#                     (default k3s, k3k-e2e-password, k3s)
# Needs root (it runs the server as the `postgres` user, as PostgreSQL requires).
set -euo pipefail

DIR=${PG_DIR:-${HOSTCLUSTER_DIR:-/tmp/k3k-hostcluster}/postgres}
PORT=${PG_PORT:-15432}
PGUSER_=${PG_USER:-k3s}
PGPASS_=${PG_PASSWORD:-k3k-e2e-password}
PGDB_=${PG_DATABASE:-k3s}
DATA=$DIR/data
SOCK=$DIR/run

say() { printf '[%s] postgres: %s\n' "$(date +%T)" "$*" >&2; }
die() { printf 'postgres: %s\n' "$*" >&2; exit 1; }

bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$d" ] && [ -x "$d/initdb" ] || die "PostgreSQL binaries not found: apt-get install postgresql"
  echo "$d"
}

as_pg() { runuser -u postgres -- "$@"; }

pg_ctl_() { as_pg "$(bindir)/pg_ctl" -D "$DATA" "$@"; }

running() { [ -f "$DATA/postmaster.pid" ] && pg_ctl_ status >/dev/null 2>&1; }

cmd_up() {
  local address=${1:-} cidr=${2:-}
  [ -n "$address" ] && [ -n "$cidr" ] || die "usage: postgres.sh up ADDRESS CIDR"
  [ "$(id -u)" = 0 ] || die "must run as root"
  id postgres >/dev/null 2>&1 || die "no postgres user: apt-get install postgresql"
  # The address must be one of this machine's own: the server is never
  # offered to another host.
  ip -o addr show | awk '{split($4, a, "/"); print a[1]}' | grep -qxF "$address" ||
    die "$address is not an address of this machine"
  cmd_down
  local bin
  bin=$(bindir)
  install -d -o postgres -g postgres -m 0755 "$DIR"
  install -d -o postgres -g postgres -m 0700 "$DATA" "$SOCK"
  local pwfile=$SOCK/pw
  (umask 077 && printf '%s\n' "k3k-admin-$RANDOM$RANDOM" >"$pwfile") && chown postgres "$pwfile"
  as_pg "$bin/initdb" -D "$DATA" -U postgres -A scram-sha-256 --pwfile="$pwfile" --no-instructions >/dev/null
  rm -f "$pwfile"
  cat >"$DATA/pg_hba.conf" <<EOF
# TYPE  DATABASE  USER      ADDRESS        METHOD
local   all       postgres                 peer
host    all       all       127.0.0.1/32   scram-sha-256
host    all       all       $cidr   scram-sha-256
EOF
  cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = '$address'
port = $PORT
unix_socket_directories = '$SOCK'
max_connections = 100
shared_buffers = 32MB
fsync = on
EOF
  cmd_start
  as_pg "$bin/psql" -h "$SOCK" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -q <<EOF >/dev/null
CREATE ROLE "$PGUSER_" LOGIN PASSWORD '$PGPASS_';
CREATE DATABASE "$PGDB_" OWNER "$PGUSER_";
EOF
  say "listening on $address:$PORT (logins from $cidr), role $PGUSER_, database $PGDB_, data in $DATA"
  echo "$PORT"
}

cmd_start() {
  running && return 0
  pg_ctl_ -l "$DIR/postgres.log" -w -t 60 start >/dev/null
}

cmd_stop() {
  running || return 0
  pg_ctl_ -m fast -w -t 60 stop >/dev/null
}

cmd_down() {
  if [ -d "$DATA" ]; then
    cmd_stop || say "stopping failed; see $DIR/postgres.log"
  fi
  rm -rf "$DIR"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  stop) cmd_stop ;;
  start) cmd_start ;;
  *) die "usage: postgres.sh up ADDRESS CIDR | down | stop | start" ;;
esac
