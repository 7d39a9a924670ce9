//! The code `#[workflow]` generates for a function that passed every check.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::{optional_str, retry_policy, source_location, start, RetryDefault};
use crate::workflow::{WorkflowFn, WorkflowInput};

/// The function unchanged, a braced struct of the same name implementing `Workflow`, and in
/// an anonymous `const` block: the `Workflow` impl, the static `WorkflowDefinition`, its entry
/// function and its `inventory` registration.
pub(crate) fn expand(item: TokenStream, workflow: &WorkflowFn) -> TokenStream {
    let ident = &workflow.item.sig.ident;
    let vis = &workflow.item.vis;
    let cfgs: Vec<_> = workflow.item.cfg_attrs().collect();
    let input = workflow.input;
    let output = workflow.result.ok;
    let struct_doc = struct_doc(workflow);
    let start = start::start_method(workflow);

    let name = &workflow.name;
    let version = optional_str(workflow.version.as_ref());
    let description = optional_str(workflow.description.as_deref());
    let retry_policy = retry_policy(workflow.retry.as_ref(), RetryDefault::Run);
    let location = source_location(ident.span());
    // `Workflow::Output` does not require `JsonSchema`, so this one is checked here, on the
    // user's type.
    let output_schema = quote_spanned!(output.span()=> ::tasks::__private::schema_for::<#output>);

    // Decoding, encoding and the input schema go through `<#ident as Workflow>` in generic
    // helpers, whose bounds come from the trait: a type missing `Deserialize` is then reported
    // by the impl only, not once more at every use.
    let (decode, call) = match workflow.input {
        WorkflowInput::Unit => (
            quote!(let () = __tasks_decode::<#ident>(__tasks_input)?;),
            quote!(#ident(__tasks_ctx)),
        ),
        WorkflowInput::Typed(_) => (
            quote!(let __tasks_input = __tasks_decode::<#ident>(__tasks_input)?;),
            quote!(#ident(__tasks_ctx, __tasks_input)),
        ),
    };
    // The assertion and the call share the span and the predicate, so rustc reports a
    // missing `RecordError` once, on the user's error type.
    let err = workflow.result.err;
    let assert_error = quote_spanned!(err.span()=> ::tasks::__private::assert_error::<#err>(););
    let record_error = quote_spanned! {err.span()=>
        ::tasks::__private::record_error::<#err>(&__tasks_error)
    };
    // Spanned on the function name, so "future cannot be sent between threads safely"
    // points at the workflow rather than at the attribute.
    let boxed_run = quote_spanned! {ident.span()=>
        ::std::boxed::Box::pin(__tasks_run(__tasks_ctx, __tasks_input))
    };

    quote! {
        #item

        #(#cfgs)*
        #[doc = #struct_doc]
        #[allow(non_camel_case_types, dead_code)]
        #vis struct #ident {}

        #start

        #(#cfgs)*
        const _: () = {
            // The associated types are the trait assertions for the input and output: the
            // trait's bounds are checked on the user's tokens, and the helpers below only see
            // `<#ident as Workflow>::Input`, so a missing trait is reported once, here.
            impl ::tasks::__private::Workflow for #ident {
                type Input = #input;
                type Output = #output;

                fn definition() -> &'static ::tasks::__private::WorkflowDefinition {
                    &__TASKS_WORKFLOW_DEFINITION
                }
            }

            static __TASKS_WORKFLOW_DEFINITION: ::tasks::__private::WorkflowDefinition =
                ::tasks::__private::WorkflowDefinition {
                    name: #name,
                    version: #version,
                    description: #description,
                    input_schema: __tasks_input_schema::<#ident>,
                    output_schema: #output_schema,
                    retry_policy: #retry_policy,
                    location: #location,
                    entry: __tasks_entry,
                };

            fn __tasks_input_schema<__TasksW: ::tasks::__private::Workflow>(
            ) -> ::tasks::__private::serde_json::Value {
                ::tasks::__private::schema_for::<__TasksW::Input>()
            }

            fn __tasks_decode<__TasksW: ::tasks::__private::Workflow>(
                input: ::tasks::__private::serde_json::Value,
            ) -> ::core::result::Result<__TasksW::Input, ::tasks::__private::ErrorRecord> {
                ::tasks::__private::decode_input::<__TasksW::Input>(input)
            }

            fn __tasks_encode<__TasksW: ::tasks::__private::Workflow>(
                output: &__TasksW::Output,
            ) -> ::core::result::Result<
                ::tasks::__private::serde_json::Value,
                ::tasks::__private::ErrorRecord,
            > {
                ::tasks::__private::encode_output::<__TasksW::Output>(output)
            }

            async fn __tasks_run(
                __tasks_ctx: ::tasks::__private::WorkflowContext,
                __tasks_input: ::tasks::__private::serde_json::Value,
            ) -> ::core::result::Result<
                ::tasks::__private::serde_json::Value,
                ::tasks::__private::ErrorRecord,
            > {
                #assert_error
                #decode
                match #call.await {
                    ::core::result::Result::Ok(__tasks_output) => {
                        __tasks_encode::<#ident>(&__tasks_output)
                    }
                    ::core::result::Result::Err(__tasks_error) => {
                        ::core::result::Result::Err(#record_error)
                    }
                }
            }

            fn __tasks_entry(
                __tasks_ctx: ::tasks::__private::WorkflowContext,
                __tasks_input: ::tasks::__private::serde_json::Value,
            ) -> ::tasks::__private::EntryFuture {
                #boxed_run
            }

            ::tasks::__private::inventory::submit! {
                ::tasks::__private::WorkflowRegistration(&__TASKS_WORKFLOW_DEFINITION)
            }
        };
    }
}

fn struct_doc(workflow: &WorkflowFn) -> String {
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
