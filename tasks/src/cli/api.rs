//! `api`: serves [`crate::http_api`] until Ctrl-C.

use std::time::Duration;

use clap::Args;

use super::{Exit, Output, format};
use crate::Client;
use crate::http_api::{HttpApi, Token};

/// Arguments of `api`.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// The address to listen on; anything but loopback needs tokens (or --insecure-no-auth).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub bind: std::net::SocketAddr,
    /// A token the API accepts: SECRET (at least 16 characters), then @NS1,NS2 for its
    /// namespaces (default: --namespace's) or @* for all, then :read or :operate (the
    /// default). Repeat for several tokens.
    #[arg(
        long,
        env = "TASKS_API_TOKENS",
        hide_env_values = true,
        value_delimiter = ' '
    )]
    pub token: Vec<String>,
    /// Serve without tokens on an address other hosts can reach: anyone who reaches it may
    /// operate on every namespace.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// The longest a long poll waits, whatever it asks (e.g. 60s).
    #[arg(long, value_parser = format::parse_duration, default_value = "60s")]
    pub max_wait: Duration,
}

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
