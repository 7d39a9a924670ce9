//! The typed `start` function on a workflow's type: `checkout::start(&client, order)`.
//!
//! It forwards to `Client::start::<W>`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::model::Workflow;

/// `impl checkout { vis async fn start(client, input) -> Result<RunHandle<Out>, ClientError> }`.
/// A workflow that takes no input takes `()` here, as `Client::start` does, so every
/// generated `start` has the same shape.
pub(super) fn start_method(workflow: &Workflow) -> TokenStream {
    let private = &workflow.private;
    let ident = &workflow.item.sig.ident;
    let vis = &workflow.item.vis;
    let cfgs = workflow.item.cfg_attrs();
    let output = &workflow.result.ok;
    let input = &workflow.input;
    let doc = format!("Starts a run of the `{ident}` workflow and returns a handle to it.");
    quote! {
        #(#cfgs)*
        impl #ident {
            #[doc = #doc]
            #[allow(dead_code)]
            #vis async fn start(
                client: &#private::Client,
                input: #input,
            ) -> ::core::result::Result<
                #private::RunHandle<#output>,
                #private::ClientError,
            > {
                client.start::<#ident>(input).await
            }
        }
    }
}
