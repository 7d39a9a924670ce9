//! trybuild tests live in `tests/`.
