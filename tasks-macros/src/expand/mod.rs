//! Code generation from the validated [`model`](crate::model), which cannot fail. Everything
//! generated names the runtime absolutely, through `model::PrivatePath` (`::tasks::__private` by
//! default), so local modules called `tasks`, `serde`, ... cannot capture it; anything generic
//! is a function of that module rather than code repeated per item.

mod common;
pub(crate) mod fallback;
mod start;
mod step;
mod workflow;

pub(crate) use step::step;
pub(crate) use workflow::workflow;
