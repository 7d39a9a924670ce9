//! The code `#[workflow]` generates for a function that passed every check.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::common::{RetryDefault, optional_str, retry_assertion, retry_policy, source_location};
use super::start;
use crate::model::{CatchUpValue, Workflow, WorkflowInput};

/// The function unchanged, a braced struct of the same name implementing `Workflow`, and in
/// an anonymous `const` block: the `Workflow` impl, the static `WorkflowDefinition`, its entry
/// function and its `inventory` registration.
pub(crate) fn workflow(item: TokenStream, workflow: &Workflow) -> TokenStream {
    let private = &workflow.private;
    let ident = &workflow.item.sig.ident;
    let vis = &workflow.item.vis;
    let cfgs: Vec<_> = workflow.item.cfg_attrs().collect();
    let input = &workflow.input;
    let output = &workflow.result.ok;
    let struct_doc = struct_doc(workflow);
    let start = start::start_method(workflow);

    let name = &workflow.name;
    let version = optional_str(workflow.version.as_ref());
    let queue = optional_str(workflow.queue.as_ref());
    let description = optional_str(workflow.description.as_deref());
    let retry_policy = retry_policy(private, workflow.retry.as_ref(), RetryDefault::Run);
    let retry_assertion = retry_assertion(private, workflow.retry.as_ref(), &retry_policy);
    let location = source_location(private, ident.span());

    // The assertion and the recorder share the span and the predicate, so rustc reports an
    // error type that cannot be recorded once, on the user's type.
    let err = &workflow.result.err;
    let assert_error = quote_spanned!(err.span()=> #private::assert_workflow_error::<#err, _>(););
    let record = quote_spanned!(err.span()=> #private::record_workflow_error::<#err, _>);
    // The context goes through a conversion that only `WorkflowContext` has, spanned on the
    // first parameter's type: any alias of it compiles, and anything else is one error, on
    // the user's token, saying what the first parameter must be.
    let context_ty = &workflow.context;
    let context =
        quote_spanned!(context_ty.span()=> #private::context_as::<#context_ty>(__tasks_ctx));
    let call = match workflow.input {
        WorkflowInput::Unit => quote!(|__tasks_ctx, ()| #ident(#context)),
        WorkflowInput::Typed(_) => {
            quote!(|__tasks_ctx, __tasks_input| #ident(#context, __tasks_input))
        }
    };
    // Spanned on the function name, so "future cannot be sent between threads safely"
    // points at the workflow rather than at the attribute.
    let boxed_run = quote_spanned! {ident.span()=>
        ::std::boxed::Box::pin(#private::run_workflow::<#ident, _, _, _>(
            __tasks_ctx,
            __tasks_input,
            #call,
            #record,
        ))
    };

    let events = workflow.events.iter().map(|event| {
        // Spanned on the user's path: a type that is not a `tasks::Event` is reported there.
        let topic = quote_spanned!(event.span()=> <#event as #private::Event>::TOPIC);
        quote! {
            const _: () = {
                static __TASKS_EVENT_DECLARATION: #private::EventDeclaration =
                    #private::EventDeclaration {
                        workflow: #name,
                        version: #version,
                        topic: #topic,
                        schema: #private::schema_for::<#event>,
                        check: #private::check_payload::<#event>,
                    };
                #private::inventory::submit! {
                    #private::EventRegistration(&__TASKS_EVENT_DECLARATION)
                }
            };
        }
    });

    let schedule = workflow.schedule.as_ref().map(|schedule| {
        let cron = &schedule.cron;
        let timezone = schedule
            .timezone
            .clone()
            .unwrap_or_else(|| syn::LitStr::new("UTC", cron.span()));
        let catch_up = match schedule.catch_up {
            None => quote!(#private::CatchUp::Latest),
            Some(CatchUpValue::Skip) => quote!(#private::CatchUp::Skip),
            Some(CatchUpValue::Latest) => quote!(#private::CatchUp::Latest),
            Some(CatchUpValue::All(max)) => quote!(#private::CatchUp::All { max: #max }),
        };
        // An input type without `Default` is reported on the workflow's name, with why.
        let default_input = quote_spanned!(cron.span()=> #private::scheduled_input::<#ident>);
        quote! {
            const _: () = {
                static __TASKS_SCHEDULE_DECLARATION: #private::ScheduleDeclaration =
                    #private::ScheduleDeclaration {
                        workflow: #name,
                        version: #version,
                        cron: #cron,
                        timezone: #timezone,
                        catch_up: #catch_up,
                        input: #default_input,
                    };
                #private::inventory::submit! {
                    #private::ScheduleRegistration(&__TASKS_SCHEDULE_DECLARATION)
                }
            };
        }
    });

    quote! {
        #item

        #(#cfgs)*
        #[doc = #struct_doc]
        #[allow(non_camel_case_types, dead_code)]
        #vis struct #ident {}

        #start

        #(#cfgs)*
        // The entry function calls the workflow function, which may be `#[deprecated]`: an
        // old version kept for the runs still in flight. That use is ours, not the user's.
        #[allow(deprecated)]
        const _: () = {
            // The associated types are the trait assertions for the input and output: the
            // trait's bounds are checked on the user's tokens, and the generic helpers only
            // see `<#ident as Workflow>::Input`, so a missing trait is reported once, here.
            impl #private::Workflow for #ident {
                type Input = #input;
                type Output = #output;

                fn definition() -> &'static #private::WorkflowDefinition {
                    &__TASKS_WORKFLOW_DEFINITION
                }
            }

            #retry_assertion
            static __TASKS_WORKFLOW_DEFINITION: #private::WorkflowDefinition =
                #private::WorkflowDefinition {
                    name: #name,
                    version: #version,
                    description: #description,
                    input_schema: #private::input_schema::<#ident>,
                    output_schema: #private::output_schema::<#ident>,
                    check_input: #private::check_input::<#ident>,
                    retry_policy: #retry_policy,
                    queue: #queue,
                    location: #location,
                    entry: __tasks_entry,
                };

            fn __tasks_entry(
                __tasks_ctx: #private::WorkflowContext,
                __tasks_input: #private::serde_json::Value,
            ) -> #private::EntryFuture {
                #assert_error
                #boxed_run
            }

            #private::inventory::submit! {
                #private::WorkflowRegistration(&__TASKS_WORKFLOW_DEFINITION)
            }

            #(#events)*
            #schedule
        };
    }
}

fn struct_doc(workflow: &Workflow) -> String {
    let ident = workflow.item.sig.ident.to_string();
    let registered = match &workflow.version {
        Some(version) => format!("{}@{}", workflow.name.value(), version.value()),
        None => workflow.name.value(),
    };
    format!(
        "The workflow `{registered}` as a type, generated by `#[workflow]`: it implements \
         `tasks::Workflow`, whose `definition()` describes the workflow.\n\n\
         The workflow itself is the `async fn {ident}` of the same name."
    )
}
