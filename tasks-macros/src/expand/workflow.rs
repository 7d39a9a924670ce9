//! The code `#[workflow]` generates for a function that passed every check.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;

use super::common::{RetryDefault, optional_str, retry_assertion, retry_policy, source_location};
use super::start;
use crate::model::{CatchUpValue, LimitValue, Workflow, WorkflowInput};
use crate::parse::{first_span, key_text};

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

    let (concurrency, concurrency_key) = concurrency(workflow);

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
                    concurrency: #concurrency,
                    queue: #queue,
                    location: #location,
                    entry: __tasks_entry,
                };
            #concurrency_key

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

/// The definition's `concurrency` field, and the items it refers to: the key function's
/// wrapper and, for a limit given as an expression, its `const` assertion.
///
/// The user's key expression is used once, as the argument of a generic helper whose bound
/// says what it must be, spanned on that expression: a function of the wrong type is one
/// error, on the user's tokens. A closure goes through a plain `Fn(&Input) -> K` bound, which
/// gives an unannotated closure its parameter type; any other expression through a
/// higher-ranked one, which lets a function return a key borrowed from the input
/// (`fn customer_of(order: &Order) -> &str`).
fn concurrency(workflow: &Workflow) -> (TokenStream, TokenStream) {
    let private = &workflow.private;
    let ident = &workflow.item.sig.ident;
    let Some(options) = &workflow.concurrency else {
        return (quote!(::core::option::Option::None), TokenStream::new());
    };
    let key = &options.key;
    let limit = &options.limit;
    let text = key_text(key);
    // The whole call, the runtime's path included, on the user's expression: rustc spans a
    // failed bound on the call, which would otherwise reach back to the attribute.
    let span = first_span(key);
    let on_key = respan(private.to_token_stream(), span);
    let derive = match key {
        syn::Expr::Closure(_) => quote_spanned! {span=>
            #on_key::derive_concurrency_key_by_closure::<#ident, _, _>(__tasks_input, #key)
        },
        _ => quote_spanned! {span=>
            #on_key::derive_concurrency_key::<#ident, _>(__tasks_input, #key)
        },
    };
    let limit_assertion = match limit {
        LimitValue::Literal(_) => TokenStream::new(),
        LimitValue::Expr(expr) => {
            let span = first_span(expr);
            let on_limit = respan(private.to_token_stream(), span);
            quote_spanned! {span=>
                const _: () = #on_limit::assert_concurrency_limit(#expr);
            }
        }
    };
    let field = quote! {
        ::core::option::Option::Some(#private::DerivedConcurrency {
            key: __tasks_concurrency_key,
            limit: #limit,
            expression: #text,
        })
    };
    let items = quote! {
        #limit_assertion
        fn __tasks_concurrency_key(
            __tasks_input: &#private::serde_json::Value,
        ) -> ::core::result::Result<::std::string::String, #private::DeriveKeyError> {
            #derive
        }
    };
    (field, items)
}

/// `tokens` with every span set to `span`. For paths that generated code writes, so that an
/// error on an expression built around them lands on the user's token; such a path resolves
/// as before, since a span from the macro's input has the call site's hygiene.
fn respan(tokens: TokenStream, span: proc_macro2::Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let proc_macro2::TokenTree::Group(group) = &token {
                let mut inner =
                    proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                token = proc_macro2::TokenTree::Group(inner);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
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
