#!/usr/bin/env bash
# Chaos check of crash recovery on Postgres (CI runs it after the tests): worker processes
# drain runs while workers are SIGKILLed every few seconds and Postgres is restarted once,
# a worker is frozen (SIGSTOP) past its lease and resumed, and runs compose children, events
# and published state under the kills; then it checks that no run was lost, no step was
# recorded twice, no step body began after its record existed, and the resumed worker began
# none of a run it lost (tests/src/bin/chaos/main.rs says what each scenario checks). About
# two minutes, plus the build.
#
#   bash scripts/chaos.sh
#
# It never touches the cluster on 5432 or any other: it creates a Postgres cluster of its
# own on a free port (pg_createcluster, trust authentication on local connections, as root
# or through sudo), restarts that one, and drops it on the way out, failed or not. Needs
# the Postgres server packages (pg_createcluster); installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked -p tasks-tests --bin chaos
target_dir=$(cargo metadata --format-version 1 --no-deps --locked | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

as_root=""
if [ "$(id -u)" -ne 0 ] && [ "$(id -un)" != postgres ]; then as_root="sudo"; fi
version=$(ls /usr/lib/postgresql | sort -V | tail -n1)
name="chaos_$$"

# A port no cluster is configured on and nothing listens on.
port=""
for candidate in $(seq 5433 5499); do
  if pg_lsclusters -h | awk '{print $3}' | grep -qx "$candidate"; then continue; fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then continue; fi
  port=$candidate
  break
done
if [ -z "$port" ]; then
  echo "error: no free port in 5433-5499 for the chaos cluster" >&2
  exit 1
fi

drop_cluster() {
  if pg_lsclusters -h | awk '{print $1, $2}' | grep -qx "$version $name"; then
    $as_root pg_dropcluster --stop "$version" "$name"
  fi
}
trap drop_cluster EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Above the default of 100: seven worker processes, each with the store's pool and the
# pool of its execution log.
$as_root pg_createcluster --start-conf=manual --port "$port" -o max_connections=300 \
  "$version" "$name" -- --auth=trust >/dev/null
$as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start
echo "chaos: cluster $version/$name on port $port" >&2

# The run bounds itself (a minute of kills, at most 45 s of drain); this is the backstop.
timeout 240 "$target_dir/debug/chaos" run "postgres://postgres@127.0.0.1:$port/postgres" \
  "$as_root pg_ctlcluster --skip-systemctl-redirect $version $name restart"
