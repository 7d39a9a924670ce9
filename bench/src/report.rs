//! The report: one table on stdout, the same figures as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::ceiling::{self, NotifyProbe};
use crate::engine::{LatencyResult, ReplayRow, ThroughputRow};
use crate::machine::{Machine, Nodelay};
use crate::peers::{Peer, PeersResult, Ratio};
use crate::scaleout::ScaleRow;

/// The settings the figures were measured with.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// `--quick` was given.
    pub quick: bool,
    /// Connections of the engine's pool (`PgStore::connect`) and of the ceiling's.
    pub pool_connections: u32,
    /// Concurrency of the in-process worker, and of the ceiling's tasks.
    pub worker_concurrency: usize,
    /// Worker concurrency in each scale-out process (the "each" series).
    pub scale_concurrency_per_process: usize,
    /// Connections in each scale-out process's pool.
    pub scale_pool_per_process: u32,
    /// Runs started at once while enqueueing.
    pub enqueue_concurrency: usize,
}

/// A target from the benchmark issue, compared with what was measured. Informational: the
/// benchmark never fails because of it.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// What is aimed at.
    pub goal: String,
    /// What was measured.
    pub measured: String,
    /// Whether the measurement meets the goal.
    pub met: bool,
}

/// Everything one run of the benchmark measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Machine and database.
    pub machine: Machine,
    /// Settings.
    pub settings: Settings,
    /// Other sessions busy on the database during the run.
    pub other_activity: Option<crate::db::ActivityReport>,
    /// /proc/loadavg when the benchmark ended.
    pub load_average_end: Option<String>,
    /// TCP_NODELAY finding.
    pub tcp_nodelay: Option<Nodelay>,
    /// Ceiling variants; the first (`engine`) is the ceiling.
    pub ceiling: Vec<ceiling::Row>,
    /// `pg_notify` alone.
    pub notify: Option<NotifyProbe>,
    /// Throughput rows.
    pub throughput: Vec<ThroughputRow>,
    /// Idle latency.
    pub latency: Option<LatencyResult>,
    /// Replay rows.
    pub replay: Vec<ReplayRow>,
    /// Least-squares line through the replay medians.
    pub replay_fit: Option<ReplayFit>,
    /// Scale-out rows.
    pub scale_out: Vec<ScaleRow>,
    /// Kill → reclaim and the idle heartbeat cost.
    pub recovery: Option<crate::recovery::RecoveryResult>,
    /// Drains with concurrency keys, and claims on a large backlog.
    pub flow: Option<crate::flow::FlowResult>,
    /// A drain alone and beside a purge, and the purge's rate.
    pub retention: Option<crate::retention::RetentionResult>,
    /// Start delay of a trickle into one queue beside a backlog in another.
    pub fairness: Option<crate::isolation::FairnessResult>,
    /// Drains with and without a snapshot held open by another session.
    pub snapshot: Option<crate::isolation::SnapshotResult>,
    /// The drain through PgBouncer in transaction mode against direct.
    pub pgbouncer: Option<crate::pgbouncer::PgBouncerResult>,
    /// The peers' drains of the same workloads, in turns with the engine's, and the ratios
    /// measured in this run (`None` when the scenario was left out of `--only`).
    pub peers: Option<PeersResult>,
    /// The targets against the figures.
    pub targets: Vec<Target>,
    /// Scenarios that failed, with their error.
    pub errors: Vec<String>,
    /// Wall time of the whole benchmark, seconds.
    pub total_seconds: f64,
}

/// `resume_to_result_ms = intercept_ms + us_per_step * N / 1000`, fitted by least squares.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ReplayFit {
    /// Cost of a resumption with an empty history, ms.
    pub intercept_ms: f64,
    /// Cost per step of history, µs.
    pub us_per_step: f64,
    /// Coefficient of determination (1 = the points lie on the line).
    pub r_squared: f64,
}

impl ReplayFit {
    fn of(rows: &[ReplayRow]) -> Option<ReplayFit> {
        if rows.len() < 2 {
            return None;
        }
        let n = rows.len() as f64;
        let xs: Vec<f64> = rows.iter().map(|row| f64::from(row.steps)).collect();
        let ys: Vec<f64> = rows.iter().map(|row| row.resume_to_result_ms).collect();
        let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
        let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
        let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
        let syy: f64 = ys.iter().map(|y| (y - my).powi(2)).sum();
        if sxx == 0.0 {
            return None;
        }
        let slope = sxy / sxx;
        let residual: f64 = xs
            .iter()
            .zip(&ys)
            .map(|(x, y)| (y - (my + slope * (x - mx))).powi(2))
            .sum();
        Some(ReplayFit {
            intercept_ms: my - slope * mx,
            us_per_step: slope * 1000.0,
            r_squared: if syy == 0.0 {
                1.0
            } else {
                1.0 - residual / syy
            },
        })
    }
}

impl Report {
    /// The engine-statement ceiling, steps/s: the median of all rounds of the statement the
    /// engine issues per batch of finished steps (one fenced multi-row insert shared by the
    /// steps of many runs, as the Postgres store's step recorder sends it).
    pub fn ceiling_steps_per_s(&self) -> Option<f64> {
        let measured: Vec<f64> = self
            .ceiling
            .iter()
            .filter(|row| row.key == "batched")
            .flat_map(|row| row.samples_steps_per_s.iter().copied())
            .collect();
        (!measured.is_empty()).then(|| crate::stats::median(&measured))
    }

    /// Fills in ratios to the ceiling and the targets.
    pub fn finish(&mut self) {
        let ceiling = self.ceiling_steps_per_s();
        for row in &mut self.throughput {
            row.ratio_to_ceiling = ceiling.map(|c| row.steps_per_s / c);
            row.ratio_to_raw = row.raw_steps_per_s.map(|raw| row.steps_per_s / raw);
        }
        let mut targets = Vec::new();
        for row in self.throughput.iter().filter(|row| row.nodelay) {
            if let Some(ratio) = row.ratio_to_ceiling {
                targets.push(Target {
                    goal: format!("{}: steps/s >= 50 % of the ceiling", label(row)),
                    measured: format!(
                        "{:.0} % ({:.0} of {:.0})",
                        ratio * 100.0,
                        row.steps_per_s,
                        row.steps_per_s / ratio
                    ),
                    met: ratio >= 0.5,
                });
            }
            if let (Some(ratio), Some(raw)) = (row.ratio_to_raw, row.raw_steps_per_s) {
                targets.push(Target {
                    goal: format!(
                        "{}: steps/s >= 50 % of the same workload's raw statements",
                        label(row)
                    ),
                    measured: format!(
                        "{:.0} % ({:.0} of {:.0})",
                        ratio * 100.0,
                        row.steps_per_s,
                        raw
                    ),
                    met: ratio >= 0.5,
                });
            }
        }
        targets.extend(
            self.peers
                .as_ref()
                .map(openworkflow_targets)
                .unwrap_or_default(),
        );
        if let Some(latency) = &self.latency {
            targets.push(Target {
                goal: "idle latency p50 <= 5 ms".into(),
                measured: format!("{:.1} ms", latency.total_ms.p50),
                met: latency.total_ms.p50 <= 5.0,
            });
            targets.push(Target {
                goal: "idle latency p99 <= 25 ms".into(),
                measured: format!("{:.1} ms", latency.total_ms.p99),
                met: latency.total_ms.p99 <= 25.0,
            });
        }
        self.replay_fit = ReplayFit::of(&self.replay);
        if let [first, .., before, last] = self.replay.as_slice() {
            // The cost per step of the last span (say 1000 -> 2000 steps) against the
            // average cost per step up to its start (0 -> 1000): about 1 when the cost grows
            // linearly, 3 if it grew with the square of the history.
            if before.steps > first.steps && last.steps > before.steps {
                let per_step = |from: &ReplayRow, to: &ReplayRow| {
                    (to.resume_to_result_ms - from.resume_to_result_ms) * 1000.0
                        / f64::from(to.steps - from.steps)
                };
                let marginal = per_step(before, last);
                let average = per_step(first, before);
                let ratio = marginal / average;
                targets.push(Target {
                    goal: format!(
                        "replay grows linearly: us/step {}->{} vs {}->{} (x <= 1.5)",
                        before.steps, last.steps, first.steps, before.steps
                    ),
                    measured: format!("{marginal:.1} vs {average:.1} us/step (x{ratio:.2})"),
                    met: ratio <= 1.5,
                });
            }
        }
        // Adding identical workers is the target; the series that splits a fixed
        // total concurrency over the processes is shown in the table for information.
        let series: Vec<&ScaleRow> = self.scale_out.iter().filter(|row| !row.split).collect();
        if let Some(one) = series.iter().find(|row| row.processes == 1) {
            let worst = series
                .iter()
                .filter(|row| row.processes > 1)
                .filter_map(|row| row.change_vs_one_pct)
                .fold(f64::INFINITY, f64::min);
            if worst.is_finite() {
                targets.push(Target {
                    goal: "scale-out (same concurrency each): steps/s does not fall (within 10 %)"
                        .into(),
                    measured: format!(
                        "worst {worst:+.0} % vs {:.0} steps/s with 1 process",
                        one.steps_per_s
                    ),
                    met: worst >= -10.0,
                });
            }
        }
        if let Some(r) = &self.recovery {
            targets.push(Target {
                goal: "median kill -> reclaim <= 5 s".into(),
                measured: format!(
                    "{:.2} s over {} kills",
                    r.median_reclaim_s,
                    r.reclaim_s.len()
                ),
                met: r.median_reclaim_s <= 5.0,
            });
            targets.push(Target {
                goal: format!(
                    "behind {} pending runs: median kill -> reclaim <= 5 s, max <= 8 s",
                    r.backlog
                ),
                measured: format!(
                    "median {:.2} s, max {:.2} s over {} kills",
                    r.median_backlog_reclaim_s,
                    r.max_backlog_reclaim_s,
                    r.backlog_reclaim_s.len()
                ),
                met: r.median_backlog_reclaim_s <= 5.0 && r.max_backlog_reclaim_s <= 8.0,
            });
        }
        self.targets = targets;
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        self.write_table(&mut out)
            .expect("writing to a String cannot fail");
        out
    }

    fn write_table(&self, out: &mut String) -> std::fmt::Result {
        self.write_header(out)?;
        self.write_ceiling(out)?;
        self.write_throughput(out)?;
        self.write_latency(out)?;
        self.write_replay(out)?;
        self.write_scale_out(out)?;
        self.write_recovery(out)?;
        if let Some(flow) = &self.flow {
            out.push_str(&crate::flow::table(flow));
        }
        if let Some(retention) = &self.retention {
            out.push_str(&crate::retention::table(retention));
        }
        out.push_str(&crate::isolation::table(
            self.fairness.as_ref(),
            self.snapshot.as_ref(),
        ));
        if let Some(pgbouncer) = &self.pgbouncer {
            out.push_str(&crate::pgbouncer::table(pgbouncer));
        }
        match &self.peers {
            Some(peers) => out.push_str(&crate::peers::table(peers)),
            None => out.push_str(
                "\nPEERS  no ratio to any peer: the peers scenario was left out of --only\n",
            ),
        }
        self.write_footer(out)
    }

    fn write_header(&self, out: &mut String) -> std::fmt::Result {
        let m = &self.machine;
        let s = &self.settings;
        let version = m.postgres_version.split(" on ").next();
        writeln!(out)?;
        writeln!(
            out,
            "tasks-bench{}  {}  commit {}",
            if s.quick { " --quick" } else { "" },
            m.date,
            m.git_commit.as_deref().unwrap_or("?")
        )?;
        writeln!(
            out,
            "machine      {} x {}, {} MiB RAM, Linux {}",
            m.nproc, m.cpu_model, m.memory_mib, m.kernel
        )?;
        writeln!(
            out,
            "database     {}, fsync={} synchronous_commit={} wal_sync_method={} commit_delay={} \
             shared_buffers={}, via {}",
            version.unwrap_or(&m.postgres_version),
            m.fsync,
            m.synchronous_commit,
            m.wal_sync_method,
            m.commit_delay,
            m.shared_buffers,
            m.connection
        )?;
        write!(
            out,
            "disturbance  {} other active sessions and {} other runs at start",
            m.other_active_sessions, m.other_runs
        )?;
        if let Some(a) = &self.other_activity {
            write!(
                out,
                "; other sessions busy in {:.0} % of {} samples (mean {:.2}); load average {} at \
                 start, {} at end",
                a.busy_pct,
                a.samples,
                a.mean_sessions,
                m.load_average_start.as_deref().unwrap_or("?"),
                self.load_average_end.as_deref().unwrap_or("?")
            )?;
        }
        writeln!(out)?;
        writeln!(
            out,
            "engine       PgStore::connect pool of {} connections (its LISTEN holds one); worker \
             concurrency {}; steps are no-ops",
            s.pool_connections, s.worker_concurrency
        )?;
        writeln!(
            out,
            "columns      wtx: transactions that wrote (exact, cluster-wide); fsync: \
             pg_stat_wal.wal_sync (approximate); cli/pg: CPU us per step in the benchmark's \
             processes / in Postgres; cpu%: share of all {} CPUs busy with either",
            m.nproc
        )
    }

    fn write_ceiling(&self, out: &mut String) -> std::fmt::Result {
        if self.ceiling.is_empty() {
            return Ok(());
        }
        writeln!(out)?;
        writeln!(
            out,
            "1. CEILING  the engine's step SQL through sqlx alone, no engine; one task per \
             worker slot, steps spread over runs as in the 10-step drain"
        )?;
        writeln!(
            out,
            "   {:<50} {:>5} {:>5} {:>6} {:>6} {:>8} {:>9} {:>7} {:>5} {:>5} {:>6} {:>6} {:>5}  steps/s of rounds",
            "variant",
            "conns",
            "tasks",
            "steps",
            "s",
            "steps/s",
            "commits/s",
            "ms/step",
            "wtx",
            "fsync",
            "cli",
            "pg",
            "cpu%"
        )?;
        for row in &self.ceiling {
            writeln!(
                out,
                "   {:<50} {:>5} {:>5} {:>6} {:>6.2} {:>8.0} {:>9.0} {:>7.2} {:>5.2} {:>5.2} {:>6.0} {:>6.0} {:>5.0}  {}",
                row.label,
                row.connections,
                row.concurrency,
                row.steps,
                row.seconds,
                row.steps_per_s,
                row.commits_per_s,
                row.ms_per_step_per_task,
                row.per_step.write_txns,
                row.per_step.wal_syncs,
                row.cpu_per_step.client_ms * 1000.0,
                row.cpu_per_step.postgres_ms * 1000.0,
                row.cpu_per_step.busy_pct,
                rounds(&row.samples_steps_per_s)
            )?;
        }
        writeln!(
            out,
            "   ms/step: how long one task waits per step (pool queueing included); each row is \
             its median round, variants taking turns"
        )?;
        if let Some(c) = self.ceiling_steps_per_s() {
            writeln!(
                out,
                "   ceiling used for the ratios below: {c:.0} steps/s (median of every round of \
                 the engine's batched step insert)"
            )?;
        }
        if let Some(n) = &self.notify {
            writeln!(
                out,
                "   pg_notify alone: {:.0} notifying commits/s ({} conns, {} tasks); \
                 NOTIFY -> LISTEN delivery p50 {:.2} ms, p99 {:.2} ms",
                n.commits_per_s, n.connections, n.concurrency, n.delivery_ms.p50, n.delivery_ms.p99
            )?;
        }
        Ok(())
    }

    fn write_throughput(&self, out: &mut String) -> std::fmt::Result {
        if self.throughput.is_empty() {
            return Ok(());
        }
        writeln!(out)?;
        writeln!(
            out,
            "2. THROUGHPUT  enqueue, then drain with one in-process worker; timed from worker \
             start to the last run completed"
        )?;
        writeln!(
            out,
            "   {:<26} {:>4} {:>6} {:>9} {:>6} {:>6} {:>6} {:>8} {:>6} {:>5} {:>7} {:>5} {:>6} {:>6} {:>5}  steps/s of rounds",
            "workload",
            "conc",
            "steps",
            "enqueue/s",
            "claim1",
            "s",
            "wf/s",
            "steps/s",
            "/ceil",
            "wtx",
            "wtx/run",
            "fsync",
            "cli",
            "pg",
            "cpu%"
        )?;
        for row in &self.throughput {
            writeln!(
                out,
                "   {:<26} {:>4} {:>6} {:>9.0} {:>4.0}ms {:>6.2} {:>6.0} {:>8.0} {:>5.0}% {:>5.2} {:>7.1} {:>5.2} {:>6.0} {:>6.0} {:>5.0}  {}",
                label(row),
                row.concurrency,
                row.steps,
                row.enqueue_runs_per_s,
                row.first_claim_ms,
                row.seconds,
                row.workflows_per_s,
                row.steps_per_s,
                row.ratio_to_ceiling.unwrap_or(f64::NAN) * 100.0,
                row.per_step.write_txns,
                row.write_txns_per_run,
                row.per_step.wal_syncs,
                row.cpu_per_step.client_ms * 1000.0,
                row.cpu_per_step.postgres_ms * 1000.0,
                row.cpu_per_step.busy_pct,
                rounds(&row.samples_steps_per_s)
            )?;
        }
        writeln!(
            out,
            "   claim1: worker start -> first claim; per-step columns include the runs' own \
             costs (claim, completion, wake-ups)"
        )?;
        writeln!(
            out,
            "   the same workloads through the engine's statements alone (claims, step records, \
             completions; sqlx, no engine; see bench/README.md):"
        )?;
        for row in &self.throughput {
            if let (Some(raw), Some(ratio)) = (row.raw_steps_per_s, row.ratio_to_raw) {
                writeln!(
                    out,
                    "   {:<26} {:>8.0} steps/s raw; the engine at {:>3.0} %   raw steps/s of rounds {}",
                    label(row),
                    raw,
                    ratio * 100.0,
                    rounds(&row.raw_samples_steps_per_s)
                )?;
            }
        }
        writeln!(
            out,
            "   where a run's time goes (median round; ms, database clock): claim -> 1st step \
             recorded | step -> next step recorded | last step -> run done | run (mean) | \
             slot idle per run"
        )?;
        for row in &self.throughput {
            let p = &row.phases;
            writeln!(
                out,
                "   {:<26} {:>6.2} | {:>6.2} | {:>6.2} | {:>6.2} | {:>6.2}",
                label(row),
                p.claim_to_first_step_ms,
                p.between_steps_ms,
                p.last_step_to_done_ms,
                p.run_ms,
                p.slot_idle_ms
            )?;
        }
        Ok(())
    }

    fn write_latency(&self, out: &mut String) -> std::fmt::Result {
        let Some(l) = &self.latency else {
            return Ok(());
        };
        let b = &l.breakdown;
        writeln!(out)?;
        writeln!(
            out,
            "3. LATENCY  {} one-step runs started one at a time ({} ms apart) against an idle \
             worker (concurrency {}): start -> result()",
            l.total_ms.n, l.gap_ms, l.concurrency
        )?;
        writeln!(
            out,
            "   p50 {:.2} ms   p95 {:.2} ms   p99 {:.2} ms   max {:.2} ms   (start() alone: \
             p50 {:.2} ms; {:.1} write transactions per run)",
            l.total_ms.p50,
            l.total_ms.p95,
            l.total_ms.p99,
            l.total_ms.max,
            l.start_ms.p50,
            l.write_txns_per_run
        )?;
        writeln!(
            out,
            "   median phases, ms: call -> insert {:.2} | insert -> claim {:.2} | claim -> step \
             start {:.2} | step start -> recorded {:.2} | recorded -> run done {:.2} | run done \
             -> result {:.2}",
            b.call_to_insert,
            b.insert_to_claim,
            b.claim_to_step,
            b.step,
            b.step_to_run_done,
            b.run_done_to_result
        )?;
        writeln!(
            out,
            "   event wake-up (send_event -> result() of a run parked on its wait, same idle \
             worker): p50 {:.2} ms   p99 {:.2} ms   ({:.2} x start -> result at p50)",
            l.event_ms.p50,
            l.event_ms.p99,
            l.event_ms.p50 / l.total_ms.p50
        )?;
        writeln!(
            out,
            "   child round trip (parent start -> child done -> parent result(), one child, \
             same idle worker): p50 {:.2} ms   p99 {:.2} ms   ({:.2} x start -> result at p50)",
            l.child_ms.p50,
            l.child_ms.p99,
            l.child_ms.p50 / l.total_ms.p50
        )
    }

    fn write_replay(&self, out: &mut String) -> std::fmt::Result {
        if self.replay.is_empty() {
            return Ok(());
        }
        writeln!(out)?;
        writeln!(
            out,
            "4. REPLAY  a run with N completed steps, parked on a durable sleep, is paused and \
             then resumed: resume() -> result() (medians)"
        )?;
        writeln!(
            out,
            "   the resumed execution reads the history once, replays N memoized steps, \
             completes the sleep and the run"
        )?;
        writeln!(
            out,
            "   {:>6} {:>5} {:>14} {:>14} {:>12} {:>16} {:>14} {:>20}",
            "N",
            "reps",
            "resume->result",
            "history read",
            "of it SQL",
            "us/step vs N=0",
            "us/history row",
            "1st run ms/step"
        )?;
        for row in &self.replay {
            writeln!(
                out,
                "   {:>6} {:>5} {:>11.2} ms {:>11.2} ms {:>9.2} ms {:>16} {:>14.1} {:>20}",
                row.steps,
                row.repetitions,
                row.resume_to_result_ms,
                row.history_read_ms,
                row.history_raw_sql_ms,
                row.us_per_step.map_or("-".into(), |v| format!("{v:.1}")),
                row.history_us_per_row,
                row.first_execution_ms_per_step
                    .map_or("-".into(), |v| format!("{v:.2}"))
            )?;
        }
        if let Some(fit) = &self.replay_fit {
            writeln!(
                out,
                "   least-squares fit: resume->result = {:.2} ms + {:.1} us x N   (R^2 = {:.3})",
                fit.intercept_ms, fit.us_per_step, fit.r_squared
            )?;
        }
        Ok(())
    }

    fn write_recovery(&self, out: &mut String) -> std::fmt::Result {
        let Some(r) = &self.recovery else {
            return Ok(());
        };
        writeln!(out)?;
        writeln!(
            out,
            "RECOVERY  a worker process holding {} runs is SIGKILLed; another is idle, then draining a backlog",
            r.runs_per_kill
        )?;
        let each: Vec<String> = r.reclaim_s.iter().map(|s| format!("{s:.2}")).collect();
        writeln!(
            out,
            "  kill -> reclaim          median {:.2} s, max {:.2} s  (each: {} s; lease {:.0} s)",
            r.median_reclaim_s,
            r.max_reclaim_s,
            each.join(", "),
            r.lease_s
        )?;
        let each: Vec<String> = r
            .backlog_reclaim_s
            .iter()
            .map(|s| format!("{s:.2}"))
            .collect();
        writeln!(
            out,
            "  ... behind {} pending    median {:.2} s, max {:.2} s  (each: {} s; the other worker drains them, {} still pending at the reclaim, fewest {})",
            r.backlog,
            r.median_backlog_reclaim_s,
            r.max_backlog_reclaim_s,
            each.join(", "),
            r.backlog_left
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            r.backlog_left.iter().min().copied().unwrap_or(0)
        )?;
        writeln!(
            out,
            "  idle worker heartbeats   {:.2} write transactions/s",
            r.idle_heartbeats_per_s
        )
    }

    fn write_scale_out(&self, out: &mut String) -> std::fmt::Result {
        if self.scale_out.is_empty() {
            return Ok(());
        }
        writeln!(out)?;
        writeln!(
            out,
            "5. SCALE-OUT  the same drain with separate worker processes, each with its own \
             pool of {}; timed from \"go\" to the last run completed; median round shown",
            self.scale_out[0].pool_per_process
        )?;
        writeln!(
            out,
            "   {:>5} {:>9} {:>11} {:>6} {:>6} {:>8} {:>9} {:>5} {:>6} {:>6} {:>5}  steps/s of rounds    runs per process",
            "procs",
            "conc/proc",
            "workload",
            "s",
            "wf/s",
            "steps/s",
            "vs 1 proc",
            "wtx",
            "cli",
            "pg",
            "cpu%"
        )?;
        for row in &self.scale_out {
            writeln!(
                out,
                "   {:>5} {:>9} {:>11} {:>6.2} {:>6.0} {:>8.0} {:>9} {:>5.2} {:>6.0} {:>6.0} {:>5.0}  {:<20} {:?}",
                row.processes,
                row.concurrency_per_process,
                format!("{} x {}", row.runs, row.steps_per_run),
                row.seconds,
                row.workflows_per_s,
                row.steps_per_s,
                row.change_vs_one_pct
                    .map_or("-".into(), |v| format!("{v:+.0} %")),
                row.per_step.write_txns,
                row.cpu_per_step.client_ms * 1000.0,
                row.cpu_per_step.postgres_ms * 1000.0,
                row.cpu_per_step.busy_pct,
                rounds(&row.samples_steps_per_s),
                row.runs_per_process
            )?;
        }
        Ok(())
    }

    fn write_footer(&self, out: &mut String) -> std::fmt::Result {
        if let Some(n) = &self.tcp_nodelay {
            writeln!(out)?;
            writeln!(
                out,
                "TCP_NODELAY  sqlx-core {}: {}",
                n.sqlx_core_version,
                n.source
                    .as_deref()
                    .unwrap_or("source not found in the cargo registry")
            )?;
            writeln!(
                out,
                "   live check: {}/{} sockets of a fresh engine pool have TCP_NODELAY on \
                 (getsockopt); the rows marked 'TCP_NODELAY off' cleared it with setsockopt",
                n.sockets_with_nodelay, n.sockets_checked
            )?;
        }
        if !self.targets.is_empty() {
            writeln!(out)?;
            writeln!(out, "TARGETS (informational, never a failure)")?;
            for t in &self.targets {
                writeln!(
                    out,
                    "   {:<8} {:<70} {}",
                    if t.met { "[met]" } else { "[NOT met]" },
                    t.goal,
                    t.measured
                )?;
            }
        }
        for error in &self.errors {
            writeln!(out, "ERROR {error}")?;
        }
        writeln!(out)?;
        writeln!(out, "total {:.0} s", self.total_seconds)
    }
}

/// The target against OpenWorkflow, only where this run measured the ratio (the
/// engine's drain and OpenWorkflow's, in turns on the same Postgres); without that
/// measurement there is nothing to compare.
fn openworkflow_targets(peers: &PeersResult) -> Vec<Target> {
    peers
        .workloads
        .iter()
        .filter_map(
            |workload| match peers.ratio(Peer::OpenWorkflow, workload.steps_per_run)? {
                Ratio::Measured(ratio) => Some(Target {
                    goal: format!(
                        "{} x {}: >= 3 x OpenWorkflow, both measured in this run",
                        workload.runs, workload.steps_per_run
                    ),
                    measured: format!("{ratio:.2} x"),
                    met: *ratio >= 3.0,
                }),
                Ratio::NoRatio(_) => None,
            },
        )
        .collect()
}

/// Every round's figure, in the order measured.
fn rounds(samples: &[f64]) -> String {
    samples
        .iter()
        .map(|v| format!("{v:.0}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `1000 x 4` (plus a marker for variants).
fn label(row: &ThroughputRow) -> String {
    format!(
        "{} x {}{}",
        row.runs,
        row.steps_per_run,
        if row.nodelay { "" } else { ", TCP_NODELAY off" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::{PeerRow, PeersWorkload};

    fn peers(ratio: Ratio) -> PeersResult {
        PeersResult {
            skipped: None,
            concurrency: 100,
            rounds: 1,
            workloads: vec![PeersWorkload {
                runs: 1000,
                steps_per_run: 4,
                engine_steps_per_s: None,
                engine_samples_steps_per_s: Vec::new(),
                engine_failures: Vec::new(),
                peers: vec![PeerRow {
                    ratio,
                    ..PeerRow::new(Peer::OpenWorkflow, None)
                }],
            }],
        }
    }

    #[test]
    fn the_openworkflow_target_comes_from_the_measured_ratio_only() {
        let met = openworkflow_targets(&peers(Ratio::Measured(3.5)));
        assert_eq!(met.len(), 1);
        assert!(met[0].met);
        assert_eq!(met[0].measured, "3.50 x");
        assert!(!openworkflow_targets(&peers(Ratio::Measured(2.0)))[0].met);
        assert!(
            openworkflow_targets(&peers(Ratio::NoRatio("Node.js is missing".into()))).is_empty()
        );
        assert!(openworkflow_targets(&PeersResult::skipped("--no-peers given")).is_empty());
    }
}
