#!/usr/bin/env bash
# Checks that the published crates build with the Rust version the workspace declares
# (`rust-version` in Cargo.toml), with the locked dependencies. Installs that toolchain with
# rustup when it is missing, and builds in a target directory of its own so that the main
# build's artifacts are not thrown away.
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$msrv" ] || { echo "error: no rust-version in Cargo.toml" >&2; exit 1; }
if ! rustup toolchain install "$msrv" --profile minimal >/dev/null; then
  # A machine that cannot download toolchains cannot run this check; say so loudly rather
  # than fail every build for want of a download.
  echo "warning: could not install Rust $msrv; the declared rust-version was NOT checked" >&2
  exit 0
fi
echo "Checking the published crates with Rust $msrv" >&2
# The optional parts too (the command line, the dashboard, anyhow errors): they are published.
CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check --locked \
  -p tasks -p tasks-macros -p tasks-runtime -p tasks-conformance --features tasks/cli,tasks/dashboard,tasks/anyhow
