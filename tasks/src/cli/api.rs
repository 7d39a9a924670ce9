//! `api`: serves [`crate::http_api`] until Ctrl-C.

use super::{ApiArgs, Exit, Output};
use crate::Client;
use crate::http_api::{HttpApi, Token};

pub(super) async fn serve(
    client: &Client,
    args: &ApiArgs,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let namespace = client.store().namespace().to_owned();
    let mut tokens = Vec::new();
    for text in &args.token {
        match Token::parse(text) {
            Ok(token) => tokens.push(token.or_namespace(&namespace)),
            Err(error) => {
                let _ = writeln!(err, "error: --token: {error}");
                return Exit::Usage;
            }
        }
    }
    let mut api = HttpApi::new(client.clone()).tokens(tokens.iter().cloned());
    if tokens.is_empty() {
        if !args.bind.ip().is_loopback() && !args.insecure_no_auth {
            let _ = writeln!(
                err,
                "error: {} is reachable from other hosts: give the API tokens (--token), or \
                 pass --insecure-no-auth to let anyone who can reach it operate on every \
                 namespace",
                args.bind
            );
            return Exit::Usage;
        }
        let _ = writeln!(
            err,
            "warning: the API has no tokens: anyone who can reach {} may operate on every \
             namespace",
            args.bind
        );
        api = api.without_authentication();
    }
    let listener = match tokio::net::TcpListener::bind(args.bind).await {
        Ok(listener) => listener,
        Err(error) => {
            let _ = writeln!(err, "error: cannot listen on {}: {error}", args.bind);
            return Exit::Usage;
        }
    };
    let address = listener.local_addr().unwrap_or(args.bind);
    let router = api.max_wait(args.max_wait).router();
    let _ = writeln!(
        out,
        "HTTP API on http://{address}/v1/namespaces/{namespace}/ (OpenAPI at /openapi.json); \
         Ctrl-C stops it",
    );
    let _ = out.flush();
    match crate::http_api::serve(listener, router).await {
        Ok(()) => Exit::Success,
        Err(error) => {
            let _ = writeln!(err, "error: the API stopped: {error}");
            Exit::Failure
        }
    }
}
