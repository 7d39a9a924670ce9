//! Validation: turns a parsed [`Input`] into the [`model`](crate::model), or into an
//! [`Invalid`] that carries every error at once, each on its own token.

mod common;
mod step;
mod workflow;

use crate::kind::MacroKind;
use crate::model::{Invalid, PrivatePath, StandIn, Step, Workflow};
use crate::parse::Input;

/// Validates a `#[workflow]` function.
pub(crate) fn workflow(input: Input) -> Result<Workflow, Invalid> {
    let Input {
        kind,
        item,
        options,
        mut errors,
    } = input;
    debug_assert_eq!(kind, MacroKind::Workflow);
    common::check_common(kind, &item, &mut errors);
    let workflow_input = workflow::workflow_input(&item, &mut errors);
    let result = common::result_types(kind, &item, &mut errors);
    let private = PrivatePath::new(options.krate.as_ref());
    match (errors.finish(), workflow_input, result) {
        (Ok(()), Some((context, workflow_input)), Some(result)) => Ok(Workflow {
            context,
            name: options.name_or(&item.sig.ident),
            version: options.version,
            description: workflow::description(&item),
            retry: options.retry,
            input: workflow_input,
            result,
            private,
            events: options.events,
            schedule: options.schedule,
            concurrency: options.concurrency,
            queue: options.queue,
            item,
        }),
        (errors, workflow_input, result) => Err(Invalid {
            // A missing input or result always records an error, so `errors` is never empty.
            errors: errors.err().unwrap_or_default(),
            stand_in: workflow::needs_stand_in(&item).then(|| {
                Box::new(StandIn {
                    input: workflow_input.map(|(_, input)| input),
                    output: result.map(|result| result.ok),
                    private,
                    item,
                })
            }),
        }),
    }
}

/// Validates a `#[step]` function. A failed step needs no stand-in: the function is emitted
/// untouched, still compiles and can be called, so nothing cascades.
pub(crate) fn step(input: Input) -> Result<Step, Invalid> {
    let Input {
        kind,
        item,
        options,
        mut errors,
    } = input;
    debug_assert_eq!(kind, MacroKind::Step);
    common::check_common(kind, &item, &mut errors);
    let result = common::result_types(kind, &item, &mut errors);
    match (errors.finish(), result) {
        (Ok(()), Some(result)) => Ok(Step {
            name: options.name_or(&item.sig.ident),
            retry: options.retry,
            timeout: options.timeout,
            record_args: options.record_args.unwrap_or(true),
            args: step::step_args(&item),
            result,
            private: PrivatePath::new(options.krate.as_ref()),
            item,
        }),
        // A missing result always records an error, so `errors` is never empty.
        (errors, _) => Err(Invalid {
            errors: errors.err().unwrap_or_default(),
            stand_in: None,
        }),
    }
}
