#!/usr/bin/env bash
# Chaos check of crash recovery on Postgres: several worker processes drain runs while
# workers are SIGKILLed every few seconds and Postgres is restarted once; then it checks that
# no run was lost, no step was recorded twice, and no step ran again after its record
# existed. Bounded to about two minutes.
#
# NOT part of scripts/test.sh: it restarts the Postgres server, which fails every other
# session on it (other test runs, other developers). Run it on a machine of your own:
#
#   scripts/chaos.sh
#
# Uses $DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test) and restarts the local
# cluster with pg_ctlcluster; set CHAOS_PG_RESTART to another command (or to "" to skip the
# restart).
set -euo pipefail
cd "$(dirname "$0")/.."

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
if [ -z "${CHAOS_PG_RESTART+set}" ]; then
  CHAOS_PG_RESTART="pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql | head -n1) main restart"
fi

cargo build --locked -p tasks-tests --bin chaos
target_dir="${CARGO_TARGET_DIR:-target}"
timeout 150 "$target_dir/debug/chaos" run "$DATABASE_URL" "$CHAOS_PG_RESTART"
