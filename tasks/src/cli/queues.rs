//! `queues list`: the configured queues of the namespace, with their limits (see
//! [`crate::store::queue`]). A queue without configuration has no limits and is not listed.

use clap::Subcommand;
use serde_json::json;

use super::format::table;
use super::{Exit, Output, store_failed};
use crate::Client;
use crate::Queue;

/// `queues` subcommands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum QueuesCommand {
    /// The configured queues of the namespace, by name, with their limits.
    List {
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn to_json(queue: &Queue) -> serde_json::Value {
    json!({
        "name": queue.name,
        "concurrency": queue.concurrency,
        "rateLimit": queue.rate_limit.map(|rate| json!({
            "starts": rate.starts,
            "periodMs": u64::try_from(rate.period.as_millis()).unwrap_or(u64::MAX),
        })),
        "keyRateLimit": queue.key_rate_limit.map(|rate| json!({
            "starts": rate.starts,
            "periodMs": u64::try_from(rate.period.as_millis()).unwrap_or(u64::MAX),
        })),
        "keyConcurrency": queue.key_concurrency,
        "windowStart": queue.window_start.map(|at| at.to_rfc3339()),
        "windowStarts": queue.window_starts,
        "updatedAt": queue.updated_at.to_rfc3339(),
    })
}

pub(super) async fn list(client: &Client, json: bool, out: Output<'_>, err: Output<'_>) -> Exit {
    let queues = match client.list_queues().await {
        Ok(queues) => queues,
        Err(error) => return store_failed(&error, err),
    };
    if json {
        let document: Vec<_> = queues.iter().map(to_json).collect();
        let _ = writeln!(out, "{}", json!({ "queues": document }));
        return Exit::Success;
    }
    if queues.is_empty() {
        let _ = writeln!(
            out,
            "no configured queues (every queue runs without limits)"
        );
        return Exit::Success;
    }
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|queue| {
            vec![
                queue.name.clone(),
                queue
                    .concurrency
                    .map_or_else(|| "-".into(), |limit| limit.to_string()),
                queue
                    .key_concurrency
                    .map_or_else(|| "-".into(), |limit| limit.to_string()),
                queue.rate_limit.map_or_else(
                    || "-".into(),
                    |rate| format!("{} per {:?}", rate.starts, rate.period),
                ),
                queue.key_rate_limit.map_or_else(
                    || "-".into(),
                    |rate| format!("{} per {:?}", rate.starts, rate.period),
                ),
                match (queue.rate_limit, queue.window_start) {
                    (Some(_), Some(start)) => {
                        format!("{} since {}", queue.window_starts, start.to_rfc3339())
                    }
                    _ => "-".into(),
                },
            ]
        })
        .collect();
    let _ = write!(
        out,
        "{}",
        table(
            &[
                "NAME",
                "CONCURRENCY",
                "PER KEY CONCURRENCY",
                "RATE LIMIT",
                "PER KEY RATE",
                "WINDOW STARTS"
            ],
            &rows
        )
    );
    Exit::Success
}
