//! Parsing: the attribute's options and the function's signature, nothing validated beyond
//! what a literal can tell on its own. Depends on no other stage.

mod attr;
mod concurrency;
mod duration;
mod item;
mod meta;
mod retry;
mod schedule;

pub(crate) use attr::Options;
pub(crate) use concurrency::{ConcurrencyOptions, LimitValue, first_span, key_text};
pub(crate) use duration::DurationValue;
pub(crate) use item::ItemFn;
pub(crate) use retry::RetryOptions;
pub(crate) use schedule::{CatchUpValue, ScheduleOptions};

use proc_macro2::TokenStream;

use crate::errors::Errors;
use crate::kind::MacroKind;

/// One macro invocation, parsed: the function and the options, with the problems found in the
/// options so far (validation adds the rest).
pub(crate) struct Input {
    /// Which attribute this is.
    pub kind: MacroKind,
    /// The annotated function.
    pub item: ItemFn,
    /// The attribute's options, each kept only if it was well-formed.
    pub options: Options,
    /// Every problem found in the options.
    pub errors: Errors,
}

impl Input {
    /// Parses `#[kind(args)] item`. Fails only when `item` is not a function at all; a bad
    /// option is recorded in [`Input::errors`] and parsing goes on.
    pub(crate) fn parse(
        kind: MacroKind,
        args: TokenStream,
        item: TokenStream,
    ) -> syn::Result<Self> {
        let item = item::parse_item_fn(kind, item)?;
        let mut errors = Errors::default();
        let options = attr::parse_options(kind, args, &mut errors);
        Ok(Input {
            kind,
            item,
            options,
            errors,
        })
    }
}
