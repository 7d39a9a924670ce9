#!/usr/bin/env bash
# Checks that the published crates build with the Rust version the workspace declares
# (`rust-version` in Cargo.toml), with the locked dependencies and warnings denied: with
# every optional part on, then with each store feature alone and with neither, so that no
# `cfg` combination leaves dead code or a broken import. Between the two, it builds the
# workspace's docs with warnings denied.
#
# Installs that toolchain with rustup when it is missing, and builds in a target directory
# of its own so that the main build's artifacts are not thrown away. A machine that cannot
# install it still checks the feature combinations, with the default toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$msrv" ] || { echo "error: no rust-version in Cargo.toml" >&2; exit 1; }
toolchain="+$msrv"
compiler="Rust $msrv"
if ! rustup toolchain install "$msrv" --profile minimal >/dev/null; then
  echo "warning: could not install Rust $msrv; the declared rust-version was NOT checked" >&2
  toolchain=""
  compiler="the default toolchain"
fi
export CARGO_TARGET_DIR=target/msrv
# Applied to dependencies too, which cap their lints: only our crates' warnings fail.
export RUSTFLAGS="-D warnings"
echo "Checking the published crates with $compiler" >&2
started=$SECONDS
# The optional parts too (the command line, the dashboard, the HTTP API, anyhow errors, Prometheus,
# OpenTelemetry traces): they are
# published.
cargo $toolchain check --locked \
  -p tasks -p tasks-macros -p tasks-core -p tasks-migrations -p tasks-postgres -p tasks-sqlite \
  -p tasks-memory -p tasks-runtime -p tasks-conformance \
  --features tasks/cli,tasks/dashboard,tasks/http-api,tasks/anyhow,tasks/prometheus,tasks/schedules,tasks/testing,tasks/opentelemetry
echo "Checked every optional part in $((SECONDS - started)) s" >&2
# The docs of every crate of the workspace, private items too (a contributor's docs),
# warnings denied (no broken intra-doc link), by this toolchain's rustdoc. Here they reuse the
# dependencies' metadata of the check above (a `cargo doc` beside the main build would check
# the whole dependency tree once more).
started=$SECONDS
RUSTDOCFLAGS="-D warnings" cargo $toolchain doc --locked --workspace --no-deps --document-private-items
echo "Documented the workspace in $((SECONDS - started)) s" >&2
# Each store alone, and neither: the dashboard without a store (and without the command
# line, which the build above has on) is also the build with no store at all, for
# `tasks-runtime` and every `cfg` of `tasks` but the dashboard's own, so it stands for the
# featureless build too.
for features in postgres sqlite dashboard http-api; do
  started=$SECONDS
  cargo $toolchain check --locked -p tasks --no-default-features --features "$features"
  echo "Checked tasks with only the feature $features in $((SECONDS - started)) s" >&2
done
