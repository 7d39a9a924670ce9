//! The drain through PgBouncer in transaction mode against the same drain direct, in
//! interleaved rounds of one run: what `Pooling::Transaction` costs (a transaction around
//! every statement that would commit alone, an unnamed statement parsed and described on each
//! execution, the pooler's hop).

use std::fmt::Write as _;

use serde::Serialize;
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;
use tasks_test_support::pgbouncer::{Config, PgBouncer};

use crate::Result;
use crate::db::{APP_NAME, ENGINE_POOL_SIZE};
use crate::engine::{self, ThroughputSpec};

/// The figures of the PgBouncer scenario.
#[derive(Debug, Clone, Serialize)]
pub struct PgBouncerResult {
    /// Runs per drain.
    pub runs: usize,
    /// No-op steps per run.
    pub steps_per_run: u32,
    /// Worker concurrency.
    pub concurrency: usize,
    /// Server connections of the PgBouncer the benchmark started (`default_pool_size`);
    /// `None` for one given with `--pgbouncer-url`.
    pub server_connections: Option<u32>,
    /// Median steps/s of the direct drains.
    pub direct_steps_per_s: f64,
    /// Every direct round's steps/s.
    pub direct_samples: Vec<f64>,
    /// Median steps/s of the drains through PgBouncer.
    pub pgbouncer_steps_per_s: f64,
    /// Every round's steps/s through PgBouncer.
    pub pgbouncer_samples: Vec<f64>,
    /// Through PgBouncer over direct.
    pub ratio: f64,
}

/// `value` percent-encoded for a URL's query.
fn percent_encoded(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (byte as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Drains `runs` × `steps` directly on `url` and through PgBouncer, taking turns for
/// `rounds` rounds. Through `pgbouncer_url` when given (a transaction-mode PgBouncer in
/// front of the database of `url`); otherwise through a PgBouncer the benchmark starts in
/// front of `url`'s server (trust authentication: the server must let `url`'s user in without
/// a password from 127.0.0.1), with as many server connections as the engine's pool.
pub async fn measure(
    url: &str,
    admin: &PgPool,
    runs: usize,
    steps: u32,
    rounds: usize,
    concurrency: usize,
    pgbouncer_url: Option<&str>,
) -> Result<PgBouncerResult> {
    let direct: PgConnectOptions = url.parse()?;
    let mut own = None;
    let (through, server_connections) = match pgbouncer_url {
        Some(given) => (given.to_owned(), None),
        None => {
            let bouncer = PgBouncer::start(&Config::transaction(
                ENGINE_POOL_SIZE,
                direct.get_host(),
                direct.get_port(),
            ))?;
            let through = bouncer.url(
                direct.get_username(),
                direct.get_database().unwrap_or("postgres"),
            );
            own = Some(bouncer);
            (through, Some(ENGINE_POOL_SIZE))
        }
    };
    let separator = if through.contains('?') { '&' } else { '?' };
    // Statements through PgBouncer, `LISTEN` direct, as the guide recommends.
    let pooled = format!(
        "{through}{separator}tasks_pooling=transaction&tasks_listen_url={}&application_name={APP_NAME}",
        percent_encoded(url)
    );
    let mut direct_samples = Vec::new();
    let mut pgbouncer_samples = Vec::new();
    for round in 1..=rounds {
        for (via, target, samples) in [
            ("direct", url, &mut direct_samples),
            ("pgbouncer", pooled.as_str(), &mut pgbouncer_samples),
        ] {
            eprintln!("pgbouncer: round {round}, {runs}x{steps} {via}");
            let spec = ThroughputSpec {
                key: format!("{runs}x{steps}_{via}"),
                runs,
                steps,
                concurrency,
                nodelay: true,
            };
            let row = engine::throughput(target, admin, &spec).await?;
            samples.push(row.steps_per_s);
        }
    }
    drop(own);
    let direct_steps_per_s = crate::stats::median(&direct_samples);
    let pgbouncer_steps_per_s = crate::stats::median(&pgbouncer_samples);
    Ok(PgBouncerResult {
        runs,
        steps_per_run: steps,
        concurrency,
        server_connections,
        direct_steps_per_s,
        direct_samples,
        pgbouncer_steps_per_s,
        pgbouncer_samples,
        ratio: pgbouncer_steps_per_s / direct_steps_per_s,
    })
}

/// The scenario's lines of the printed table.
pub fn table(result: &PgBouncerResult) -> String {
    let mut out = String::new();
    let rounds = |samples: &[f64]| {
        samples
            .iter()
            .map(|s| format!("{s:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let servers = match result.server_connections {
        Some(n) => format!("{n} server connections"),
        None => "--pgbouncer-url".to_owned(),
    };
    let _ = writeln!(
        out,
        "\nPGBOUNCER  {} x {} drain (worker concurrency {}) direct and through PgBouncer in \
         transaction mode ({servers}; Pooling::Transaction, LISTEN direct), medians of \
         interleaved rounds",
        result.runs, result.steps_per_run, result.concurrency,
    );
    let _ = writeln!(
        out,
        "  direct                 {:>8.0} steps/s   (rounds: {})",
        result.direct_steps_per_s,
        rounds(&result.direct_samples)
    );
    let _ = writeln!(
        out,
        "  through PgBouncer      {:>8.0} steps/s   (rounds: {})   {:.2} x direct",
        result.pgbouncer_steps_per_s,
        rounds(&result.pgbouncer_samples),
        result.ratio
    );
    out
}
