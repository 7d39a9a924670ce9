//! Compile-pass and compile-fail tests of `#[workflow]` and `#[step]`.
//!
//! Regenerate the `.stderr` snapshots with `TRYBUILD=overwrite cargo test -p tasks-ui-tests`
//! and review every diff: each error must point at the user's token.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
