//! The typed `start` function on a workflow's type: `checkout::start(&client, order)`.
//!
//! It forwards to `Client::start::<W>`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::model::{Workflow, WorkflowInput};

/// `impl checkout { vis async fn start(client, input) -> Result<RunHandle<Out>, ClientError> }`
/// (without `input` for a workflow that takes none).
pub(super) fn start_method(workflow: &Workflow) -> TokenStream {
    let private = &workflow.private;
    let ident = &workflow.item.sig.ident;
    let vis = &workflow.item.vis;
    let cfgs = workflow.item.cfg_attrs();
    let output = &workflow.result.ok;
    let (input_param, start) = match &workflow.input {
        WorkflowInput::Unit => (TokenStream::new(), quote!(client.start::<#ident>(()).await)),
        WorkflowInput::Typed(ty) => (
            quote!(input: #ty,),
            quote!(client.start::<#ident>(input).await),
        ),
    };
    let doc = format!("Starts a run of the `{ident}` workflow and returns a handle to it.");
    quote! {
        #(#cfgs)*
        impl #ident {
            #[doc = #doc]
            #[allow(dead_code)]
            #vis async fn start(
                client: &#private::Client,
                #input_param
            ) -> ::core::result::Result<
                #private::RunHandle<#output>,
                #private::ClientError,
            > {
                #start
            }
        }
    }
}
