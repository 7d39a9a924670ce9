//! The checks only `#[step]` makes: its parameters are taken as they are.

use syn::{FnArg, PatType};

use crate::parse::ItemFn;

/// The typed parameters, in order (a receiver was reported by the common checks).
pub(super) fn step_args(item: &ItemFn) -> Vec<PatType> {
    item.sig
        .inputs
        .iter()
        .filter_map(|arg| match arg {
            FnArg::Typed(arg) => Some(arg.clone()),
            FnArg::Receiver(_) => None,
        })
        .collect()
}
