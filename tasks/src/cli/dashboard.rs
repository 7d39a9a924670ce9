//! `dashboard`: serves [`crate::dashboard`] until Ctrl-C.

use super::{DashboardArgs, Exit, Output};
use crate::Client;
use crate::dashboard::{Credentials, Dashboard};

pub(super) async fn serve(
    client: &Client,
    args: &DashboardArgs,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let credentials = match (&args.token, &args.basic_auth) {
        (Some(token), _) => Some(Credentials::Bearer(token.clone())),
        (None, basic) => basic.clone(),
    };
    if !args.bind.ip().is_loopback() && credentials.is_none() {
        let _ = writeln!(
            err,
            "warning: {} is reachable from other hosts and the dashboard has no credentials \
             (--token or --basic-auth): anyone who can reach it can start and cancel runs",
            args.bind
        );
    }
    let listener = match tokio::net::TcpListener::bind(args.bind).await {
        Ok(listener) => listener,
        Err(error) => {
            let _ = writeln!(err, "error: cannot listen on {}: {error}", args.bind);
            return Exit::Usage;
        }
    };
    let address = listener.local_addr().unwrap_or(args.bind);
    let namespace = client.store().namespace().to_owned();
    let router = Dashboard::new(client.clone())
        .credentials(credentials)
        .refresh_interval(args.refresh)
        .router();
    let _ = writeln!(
        out,
        "dashboard on http://{address}/ (namespace {:?}); Ctrl-C stops it",
        namespace,
    );
    let _ = out.flush();
    match crate::dashboard::serve(listener, router).await {
        Ok(()) => Exit::Success,
        Err(error) => {
            let _ = writeln!(err, "error: the dashboard stopped: {error}");
            Exit::Failure
        }
    }
}
