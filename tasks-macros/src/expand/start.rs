//! The typed `start` function on a workflow's type: `checkout::start(&client, order)`.
//!
//! It forwards to `Client::start::<W>`. It is kept out of the expansion until the runtime's
//! client API is settled: set [`ENABLED`] to `true` to emit it (the facade's `__private`
//! already re-exports `Client`, `RunHandle` and `ClientError`).

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::model::{Workflow, WorkflowInput};

/// Whether `#[workflow]` emits `start`.
const ENABLED: bool = true;

/// `impl checkout { vis async fn start(client, input) -> Result<RunHandle<Out>, ClientError> }`
/// (without `input` for a workflow that takes none), or nothing while [`ENABLED`] is `false`.
pub(super) fn start_method(workflow: &Workflow) -> TokenStream {
    if !ENABLED {
        return TokenStream::new();
    }
    let private = &workflow.private;
    let ident = &workflow.item.sig.ident;
    let vis = &workflow.item.vis;
    let cfgs = workflow.item.cfg_attrs();
    let output = &workflow.result.ok;
    let (input_param, start) = match &workflow.input {
        WorkflowInput::Unit => (TokenStream::new(), quote!(client.start::<#ident>(()).await)),
        // Spanned on the input type: `Client::start` wants it `Serialize`, which the
        // `Workflow` trait does not promise, and a missing impl should point there.
        WorkflowInput::Typed(ty) => (
            quote!(input: #ty,),
            quote_spanned!(ty.span()=> client.start::<#ident>(input).await),
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
