//! Compile-fail tests of `#[workflow]` and `#[step]`, through trybuild.
//!
//! The compile-pass cases in `tests/ui/pass/` are test binaries of their own (see
//! `Cargo.toml`): they reuse the workspace's build, and without them trybuild only has to
//! type-check, which spares code generation for the whole dependency tree. The pass cases
//! that run workflows on a store live in the `tests` crate (`tests/macros/`), so that
//! trybuild's copy of this crate's dependencies has no database driver to type-check.
//!
//! Regenerate the `.stderr` snapshots with `TRYBUILD=overwrite cargo test -p tasks-ui-tests`
//! and review every diff: each error must point at the user's token.

/// The flags trybuild 1.0.122 passes to rustc, plus the `--diagnostic-width=140` it adds
/// when it compiles the test cases, as `CARGO_ENCODED_RUSTFLAGS` (separated by `\x1f`).
///
/// trybuild builds the dependencies once without `--diagnostic-width` and then compiles the
/// cases with it; the changed flags make cargo build the whole dependency tree a second
/// time. `CARGO_ENCODED_RUSTFLAGS` overrides both, so both invocations agree and the
/// dependencies are built once. Check this list when upgrading trybuild (its `rustflags.rs`
/// and `cargo.rs`): stale flags cost time, and a missing `--diagnostic-width` changes how
/// long lines in the `.stderr` snapshots wrap.
const TRYBUILD_RUSTFLAGS: &[&str] = &[
    "--cfg",
    "trybuild",
    "--verbose",
    "-A",
    "dead_code",
    "--diagnostic-width=140",
];

/// Variables with which CI builds the workspace under Clippy (see `.ci/run`). The cases'
/// snapshots are the compiler's own errors: trybuild's build must not inherit them.
const CLIPPY_WRAPPER_VARS: &[&str] = &["RUSTC_WORKSPACE_WRAPPER", "CLIPPY_ARGS"];

#[test]
fn ui() {
    // SAFETY (both blocks): the only test of this binary changes the environment before
    // trybuild starts any thread, and nothing else of this process reads or writes it
    // meanwhile.
    for var in CLIPPY_WRAPPER_VARS {
        unsafe { std::env::remove_var(var) };
    }
    // Flags the caller set (coverage, say) are left to trybuild's own handling.
    if std::env::var_os("RUSTFLAGS").is_none()
        && std::env::var_os("CARGO_ENCODED_RUSTFLAGS").is_none()
    {
        unsafe {
            std::env::set_var("CARGO_ENCODED_RUSTFLAGS", TRYBUILD_RUSTFLAGS.join("\x1f"));
        }
    }
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
}
