#!/usr/bin/env bash
# Chaos check of crash recovery on Postgres, run by CI after the test command: worker
# processes drain runs while workers are SIGKILLed every 2-4 s for a minute and Postgres is
# restarted once, runs compose children, events and published state under those kills, and
# in a namespace of its own a worker is frozen (SIGSTOP) past its lease, its runs taken
# over, then resumed (SIGCONT). It fails unless every run completed, no step was recorded
# twice, no step body began after its record existed, the resumed worker began no body of
# a run it lost and got no write on one through, each child ran once per call, each event
# was consumed once, the published state ended right, and at least ten kills hit workers
# holding runs (tests/src/bin/chaos/main.rs and its modules say what each scenario checks).
# About 75 s, plus the build (none after the test command, whose build it shares).
#
#   bash scripts/chaos.sh
#
# It never touches the cluster on 5432 or any other: it creates a Postgres cluster of its
# own on a free port (pg_createcluster, trust authentication, as root or through sudo),
# restarts only that one, and drops it on the way out, failed or not. Needs the Postgres
# server packages (pg_createcluster); installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Built the way the test command builds it (cargo-nextest builds with `cargo test --no-run`
# of the workspace): after the tests, as in CI, nothing is compiled again. `cargo build
# --bin chaos` alone would resolve other features for the dependencies (no
# dev-dependencies) and compile a second copy of half the tree.
chaos=$(cargo test --no-run --locked --workspace --message-format json-render-diagnostics \
  | grep '"reason":"compiler-artifact"' | grep '"kind":\["bin"\],[^}]*"name":"chaos"' \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p')
if [ -z "$chaos" ]; then
  echo "error: the build did not name the chaos program" >&2
  exit 1
fi

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

# On the way out, however it comes: the run is stopped (`timeout` passes the signal to its
# whole process group, the worker processes with it, and resumes a stopped one so that it
# dies), then the cluster is dropped.
run=""
clean_up() {
  if [ -n "$run" ] && kill -0 "$run" 2>/dev/null; then
    kill -TERM "$run" 2>/dev/null || true
    wait "$run" 2>/dev/null || true
  fi
  if pg_lsclusters -h | awk '{print $1, $2}' | grep -qx "$version $name"; then
    $as_root pg_dropcluster --stop "$version" "$name"
  fi
}
trap clean_up EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Above the default of 100: seven worker processes, each with the store's pool and the
# pool of its execution log.
$as_root pg_createcluster --start-conf=manual --port "$port" -o max_connections=300 \
  "$version" "$name" -- --auth=trust >/dev/null
$as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start
echo "chaos: cluster $version/$name on port $port" >&2

# The run bounds itself (a minute of kills, at most 45 s of drain); the timeout is the
# backstop. In the background, so that a signal to this script is handled at once rather
# than when the run ends.
timeout 240 "$chaos" run "postgres://postgres@127.0.0.1:$port/postgres" \
  "${as_root:+$as_root }pg_ctlcluster --skip-systemctl-redirect $version $name restart" &
run=$!
wait "$run"
