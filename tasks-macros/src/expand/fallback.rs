//! What `#[workflow]` emits besides the errors when a check failed: the workflow's type with
//! a stub `Workflow` impl, so that code naming `checkout` as a type does not add a second
//! wave of "cannot find type" errors (the `fallback.rs` of thiserror).

use proc_macro2::TokenStream;
use quote::{quote, ToTokens};

use crate::check::ResultTypes;
use crate::item::ItemFn;
use crate::workflow::WorkflowInput;

/// The struct and a stub impl, using the input and output types where they were valid and
/// `()` where they were not.
pub(crate) fn workflow(
    item: &ItemFn,
    input: Option<WorkflowInput>,
    result: Option<ResultTypes>,
) -> TokenStream {
    let ident = &item.sig.ident;
    let vis = &item.vis;
    let cfgs: Vec<_> = item.cfg_attrs().collect();
    let input = input.map_or_else(|| quote!(()), |input| input.to_token_stream());
    let output = result.map_or_else(|| quote!(()), |result| result.ok.to_token_stream());
    quote! {
        #(#cfgs)*
        #[allow(non_camel_case_types, dead_code)]
        #vis struct #ident {}

        #(#cfgs)*
        const _: () = {
            impl ::tasks::__private::Workflow for #ident {
                type Input = #input;
                type Output = #output;

                fn definition() -> &'static ::tasks::__private::WorkflowDefinition {
                    ::core::unreachable!("`#[workflow]` reported an error for this function")
                }
            }
        };
    }
}
