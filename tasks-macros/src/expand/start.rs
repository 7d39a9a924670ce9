//! The typed `start` function on a workflow's type: `checkout::start(&client, order)`.
//!
//! It is `Client::start::<W>`: it returns the same start builder, so options chain on it
//! (`checkout::start(&client, order).idempotency_key("order-7").await`).

use proc_macro2::TokenStream;
use quote::quote;

use crate::model::Workflow;

/// `impl checkout { vis fn start(client, input) -> StartBuilder<'_, Out> }`.
/// A workflow that takes no input takes `()` here, as `Client::start` does, so every
/// generated `start` has the same shape.
pub(super) fn start_method(workflow: &Workflow) -> TokenStream {
    let private = &workflow.private;
    let ident = &workflow.item.sig.ident;
    let vis = &workflow.item.vis;
    let cfgs = workflow.item.cfg_attrs();
    let output = &workflow.result.ok;
    let input = &workflow.input;
    let doc = format!(
        "A start of a run of the `{ident}` workflow: give it options and `.await` it for a \
         handle to the run (`Client::start::<{ident}>`)."
    );
    quote! {
        #(#cfgs)*
        impl #ident {
            #[doc = #doc]
            #[allow(dead_code)]
            #vis fn start(
                client: &#private::Client,
                input: #input,
            ) -> #private::StartBuilder<'_, #output> {
                client.start::<#ident>(input)
            }
        }
    }
}
