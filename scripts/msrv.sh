#!/usr/bin/env bash
# Checks that the published crates build with the Rust version the workspace declares
# (`rust-version` in Cargo.toml), with the locked dependencies. Installs that toolchain with
# rustup when it is missing, and builds in a target directory of its own so that the main
# build's artifacts are not thrown away.
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$msrv" ] || { echo "error: no rust-version in Cargo.toml" >&2; exit 1; }
rustup toolchain install "$msrv" --profile minimal >/dev/null
echo "Checking the published crates with Rust $msrv" >&2
CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check --locked \
  -p tasks -p tasks-macros -p tasks-runtime -p tasks-conformance
