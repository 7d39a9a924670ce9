#!/usr/bin/env bash
# Runs the whole test suite: against a real Postgres, and SQLite temp files, with
# cargo-nextest, then the doc tests.
#
# Uses $DATABASE_URL when set; otherwise the local server at 127.0.0.1:5432 (user postgres,
# database test), starting the local cluster first if it is installed but down.
set -euo pipefail
cd "$(dirname "$0")/.."

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"

pg_up() {
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -d "$DATABASE_URL" -q
  else
    # No client tools: try the TCP port.
    (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null
  fi
}

if ! pg_up; then
  echo "Postgres is not answering at $DATABASE_URL; trying to start the local cluster..." >&2
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    for version in $(ls /etc/postgresql); do
      pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    done
  fi
  for _ in $(seq 1 30); do
    pg_up && break
    sleep 1
  done
fi
if ! pg_up; then
  cat >&2 <<MSG
error: no Postgres at $DATABASE_URL.
Start one (for example: pg_ctlcluster --skip-systemctl-redirect <version> main start)
or point DATABASE_URL at a database this user may create schemas and databases in.
MSG
  exit 1
fi
echo "Using Postgres at $DATABASE_URL" >&2

# The dashboard tests drive headless Chromium through chromedriver: Debian's `chromium` and
# `chromium-driver` packages, installed here when missing (as root, or through sudo).
if ! command -v chromedriver >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1; then
  echo "chromium or chromedriver is missing; installing Debian's chromium and chromium-driver..." >&2
  as_root=""
  if [ "$(id -u)" -ne 0 ]; then as_root="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $as_root apt-get install -y chromium chromium-driver \
    || { $as_root apt-get update && $as_root apt-get install -y chromium chromium-driver; }
fi

# The PgBouncer tests (`postgres_pgbouncer`, `conformance_pgbouncer`) start PgBouncers of
# their own: Debian's `pgbouncer` package, installed here when missing. In CI (`CI` set) they
# fail without it rather than skip.
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  echo "pgbouncer is missing; installing Debian's pgbouncer..." >&2
  as_root=""
  if [ "$(id -u)" -ne 0 ]; then as_root="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $as_root apt-get install -y pgbouncer \
    || { $as_root apt-get update && $as_root apt-get install -y pgbouncer; }
  # The package starts a system PgBouncer on port 6432; the tests use their own.
  $as_root systemctl stop pgbouncer >/dev/null 2>&1 || true
fi

# cargo-nextest runs every test binary's tests in one pool (cargo test runs the binaries one
# after the other); it ships with this machine's Rust toolchain image, and is installed from
# crates.io where it is missing.
if ! command -v cargo-nextest >/dev/null 2>&1; then
  echo "cargo-nextest is missing; installing it..." >&2
  cargo install cargo-nextest --locked
fi
# Build every test binary, and list them for nextest: with that list nextest runs them
# without calling cargo again, so that the doc tests (which nextest does not run) are
# compiled and run beside it, while its tests mostly wait on databases and timers. Cargo
# holds the target directory's lock while it compiles the doc tests; any other cargo
# command would wait for them.
target=$(cargo metadata --format-version 1 --no-deps --locked | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
mkdir -p "$target/nextest"
cargo nextest list --workspace --locked --list-type binaries-only --message-format json \
  > "$target/nextest/test-binaries.json"
cargo metadata --format-version 1 --locked > "$target/nextest/test-cargo-metadata.json"
cargo test --workspace --doc --locked > "$target/nextest/doc-tests.log" 2>&1 &
doc_tests=$!
status=0
cargo nextest run --binaries-metadata "$target/nextest/test-binaries.json" \
  --cargo-metadata "$target/nextest/test-cargo-metadata.json" "$@" || status=$?
if wait "$doc_tests"; then
  grep -E '^(test result|   Doc-tests)' "$target/nextest/doc-tests.log" >&2
else
  cat "$target/nextest/doc-tests.log" >&2
  echo "error: the doc tests failed" >&2
  status=1
fi
exit "$status"
