//! `verify-replay`: replays the stored histories of the namespace's runs against the
//! workflows of this binary, without executing any step or writing anything (see
//! [`crate::verify`]), and exits with 1 when one of them does not replay: a deploy gate.

use clap::Args;
use serde_json::json;

use super::{Exit, Output, store_failed};
use crate::{Client, VerifyOptions};

/// Arguments of `verify-replay`.
#[derive(Debug, Args)]
pub struct VerifyReplayArgs {
    /// Also verify up to this many of the most recently created finished runs (completed,
    /// failed, canceled), besides every unfinished one.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub finished_sample: u32,
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

pub(super) async fn verify_replay(
    client: &Client,
    args: &VerifyReplayArgs,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let options = VerifyOptions::default().finished_sample(args.finished_sample);
    let report = match client.verify_replay(&options).await {
        Ok(report) => report,
        Err(error) => return store_failed(&error, err),
    };
    if args.json {
        let document = json!({
            "namespace": report.namespace,
            "consistent": report.is_consistent(),
            "runs": report.runs,
        });
        let _ = writeln!(out, "{document}");
    } else {
        let _ = writeln!(out, "{report}");
    }
    if report.is_consistent() {
        Exit::Success
    } else {
        Exit::Failure
    }
}
