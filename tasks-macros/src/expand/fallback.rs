//! What a macro emits when it reported errors: the original item unchanged, the errors, and
//! for a workflow a stand-in for its type, so that code naming `checkout` as a type does not
//! add a second wave of "cannot find type" errors (the `fallback.rs` of thiserror).

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};

use crate::model::{Invalid, StandIn};

/// `item` and the errors, plus the stand-in when there is one.
pub(crate) fn invalid(item: TokenStream, invalid: Invalid) -> TokenStream {
    let Invalid { errors, stand_in } = invalid;
    let stand_in = stand_in.as_deref().map(stand_in_type);
    quote!(#item #stand_in #errors)
}

/// `item` and the error that stopped parsing (the item was not a function).
pub(crate) fn unparsed(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.into_compile_error();
    quote!(#item #error)
}

/// The struct and a stub impl, using the input and output types where they were valid and
/// `()` where they were not.
fn stand_in_type(stand_in: &StandIn) -> TokenStream {
    let StandIn {
        item,
        input,
        output,
        private,
    } = stand_in;
    let ident = &item.sig.ident;
    let vis = &item.vis;
    let cfgs: Vec<_> = item.cfg_attrs().collect();
    let input = input
        .as_ref()
        .map_or_else(|| quote!(()), ToTokens::to_token_stream);
    let output = output
        .as_ref()
        .map_or_else(|| quote!(()), ToTokens::to_token_stream);
    quote! {
        #(#cfgs)*
        #[allow(non_camel_case_types, dead_code)]
        #vis struct #ident {}

        #(#cfgs)*
        const _: () = {
            impl #private::Workflow for #ident {
                type Input = #input;
                type Output = #output;

                fn definition() -> &'static #private::WorkflowDefinition {
                    #private::invalid_workflow_definition()
                }
            }
        };
    }
}
