//! What the peers scenario reports: the rows, the ratios measured in the run (or why there
//! is none), and the table's section.

use std::fmt::Write as _;

use serde::Serialize;

/// A peer of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// OpenWorkflow (TypeScript, Node.js), the design the engine descends from.
    OpenWorkflow,
    /// DBOS Transact's Rust SDK, the `dbos` crate.
    Dbos,
    /// `durare`, a community Rust SDK on the DBOS schema.
    Durare,
}

impl Peer {
    /// Short identifier (JSON, database names).
    pub fn key(self) -> &'static str {
        match self {
            Peer::OpenWorkflow => "openworkflow",
            Peer::Dbos => "dbos",
            Peer::Durare => "durare",
        }
    }

    /// Name shown in the table.
    pub fn label(self) -> &'static str {
        match self {
            Peer::OpenWorkflow => "OpenWorkflow",
            Peer::Dbos => "DBOS (dbos)",
            Peer::Durare => "durare",
        }
    }
}

/// Why there is no ratio to a peer, or the ratio measured in this run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ratio {
    /// Engine steps/s ÷ peer steps/s, both medians of rounds of this run.
    Measured(f64),
    /// No ratio, and why.
    NoRatio(String),
}

impl Ratio {
    /// The ratio of two medians measured in this run, or why there is none. `peer` is the
    /// peer's median, or why it has none.
    pub fn of(engine: Option<f64>, peer: std::result::Result<f64, &str>) -> Ratio {
        match (engine, peer) {
            (_, Err(why)) => Ratio::NoRatio(why.to_owned()),
            (None, Ok(_)) => Ratio::NoRatio("the engine's drain failed in every round".into()),
            (Some(engine), Ok(peer)) if engine.is_finite() && peer.is_finite() && peer > 0.0 => {
                Ratio::Measured(engine / peer)
            }
            (Some(_), Ok(peer)) => {
                Ratio::NoRatio(format!("the peer's figure is unusable ({peer})"))
            }
        }
    }

    /// `2.4 x` or `no ratio: why`.
    pub fn text(&self) -> String {
        match self {
            Ratio::Measured(ratio) => format!("{ratio:.2} x"),
            Ratio::NoRatio(why) => format!("no ratio: {why}"),
        }
    }
}

/// One peer on one workload.
#[derive(Debug, Clone, Serialize)]
pub struct PeerRow {
    /// Which peer (its key).
    pub peer: String,
    /// Name shown in the table.
    pub label: String,
    /// What ran (package and runtime versions), as the peer reported it.
    pub version: Option<String>,
    /// The settings the peer ran with, as it reported them.
    pub settings: Option<serde_json::Value>,
    /// Median steps/s of the rounds that succeeded.
    pub steps_per_s: Option<f64>,
    /// Steps/s of every round that succeeded, in the order measured.
    pub samples_steps_per_s: Vec<f64>,
    /// Why the peer could not run at all (not installed, did not build).
    pub unavailable: Option<String>,
    /// Rounds that failed, with their error.
    pub failures: Vec<String>,
    /// Engine ÷ peer, or why there is none.
    pub ratio: Ratio,
}

impl PeerRow {
    /// A row with nothing measured yet; `unavailable` says why the peer cannot run, if so.
    pub fn new(peer: Peer, unavailable: Option<String>) -> PeerRow {
        PeerRow {
            peer: peer.key().into(),
            label: peer.label().into(),
            version: None,
            settings: None,
            steps_per_s: None,
            samples_steps_per_s: Vec::new(),
            unavailable,
            failures: Vec::new(),
            ratio: Ratio::NoRatio("not measured".into()),
        }
    }
}

/// One workload: the engine's drains and each peer's.
#[derive(Debug, Clone, Serialize)]
pub struct PeersWorkload {
    /// Runs drained.
    pub runs: usize,
    /// No-op steps per run.
    pub steps_per_run: u32,
    /// Median steps/s of the engine's drains in this scenario.
    pub engine_steps_per_s: Option<f64>,
    /// Steps/s of every engine round, in the order measured.
    pub engine_samples_steps_per_s: Vec<f64>,
    /// Engine rounds that failed, with their error.
    pub engine_failures: Vec<String>,
    /// Each peer.
    pub peers: Vec<PeerRow>,
}

/// The peers scenario's figures, or why it measured none.
#[derive(Debug, Clone, Serialize)]
pub struct PeersResult {
    /// Set when no peer ran at all (`--no-peers`, or the scenario was left out).
    pub skipped: Option<String>,
    /// Worker concurrency given to the engine and to every peer.
    pub concurrency: usize,
    /// Rounds; each round runs the engine, then every available peer, on every workload.
    pub rounds: usize,
    /// The workloads.
    pub workloads: Vec<PeersWorkload>,
}

impl PeersWorkload {
    /// Takes the medians of the rounds and the ratios, once every round ran.
    pub fn settle(&mut self) {
        let median = |samples: &[f64]| (!samples.is_empty()).then(|| crate::stats::median(samples));
        let engine = median(&self.engine_samples_steps_per_s);
        self.engine_steps_per_s = engine;
        for row in &mut self.peers {
            row.steps_per_s = median(&row.samples_steps_per_s);
            let peer = match (&row.unavailable, row.steps_per_s, row.failures.last()) {
                (Some(why), _, _) => Err(why.clone()),
                (None, Some(figure), _) => Ok(figure),
                (None, None, Some(failure)) => Err(format!("every round failed; last: {failure}")),
                (None, None, None) => Err("no round ran".to_owned()),
            };
            row.ratio = Ratio::of(engine, peer.as_ref().copied().map_err(String::as_str));
        }
    }
}

impl PeersResult {
    /// No peer ran, for `why`: every ratio is absent.
    pub fn skipped(why: &str) -> PeersResult {
        PeersResult {
            skipped: Some(why.to_owned()),
            concurrency: 0,
            rounds: 0,
            workloads: Vec::new(),
        }
    }

    /// The ratio to `peer` on the workload of `steps` steps per run, if the scenario ran.
    pub fn ratio(&self, peer: Peer, steps: u32) -> Option<&Ratio> {
        self.workloads
            .iter()
            .find(|w| w.steps_per_run == steps)?
            .peers
            .iter()
            .find(|row| row.peer == peer.key())
            .map(|row| &row.ratio)
    }
}

/// The table's section.
pub fn table(result: &PeersResult) -> String {
    let mut out = String::new();
    if let Some(why) = &result.skipped {
        let _ = writeln!(out, "\nPEERS  no ratio to any peer: {why}");
        return out;
    }
    let _ = writeln!(
        out,
        "\nPEERS  the same drain (enqueue, then one worker, concurrency {}) by each peer on the \
         same Postgres, in turns with the engine; {} round(s), medians; engine/peer from this run",
        result.concurrency, result.rounds
    );
    let _ = writeln!(
        out,
        "   {:<11} {:<14} {:>8}  {:<24} engine/peer",
        "workload", "who", "steps/s", "steps/s of rounds"
    );
    for w in &result.workloads {
        let workload = format!("{} x {}", w.runs, w.steps_per_run);
        let engine = format!(
            "   {:<11} {:<14} {:>8}  {}",
            workload,
            "the engine",
            w.engine_steps_per_s
                .map_or("-".into(), |v| format!("{v:.0}")),
            rounds(&w.engine_samples_steps_per_s)
        );
        let _ = writeln!(out, "{}", engine.trim_end());
        for row in &w.peers {
            let _ = writeln!(
                out,
                "   {:<11} {:<14} {:>8}  {:<24} {}",
                "",
                row.label,
                row.steps_per_s.map_or("-".into(), |v| format!("{v:.0}")),
                rounds(&row.samples_steps_per_s),
                row.ratio.text()
            );
        }
    }
    for w in &result.workloads {
        let failures = w.engine_failures.iter().map(|f| ("the engine", f));
        let peers = w
            .peers
            .iter()
            .flat_map(|row| row.failures.iter().map(|f| (row.label.as_str(), f)));
        for (who, failure) in failures.chain(peers) {
            let _ = writeln!(
                out,
                "   failed: {} x {}, {who}, {failure}",
                w.runs, w.steps_per_run
            );
        }
    }
    let mut versions: Vec<&str> = Vec::new();
    for row in result.workloads.iter().flat_map(|w| &w.peers) {
        if let Some(version) = row.version.as_deref().filter(|v| !versions.contains(v)) {
            versions.push(version);
        }
    }
    if !versions.is_empty() {
        let _ = writeln!(
            out,
            "   peers: {}; each with its defaults but the worker concurrency (see bench/README.md)",
            versions.join("; ")
        );
    }
    out
}

fn rounds(samples: &[f64]) -> String {
    samples
        .iter()
        .map(|v| format!("{v:.0}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_divides_the_engine_by_the_peer() {
        assert_eq!(Ratio::of(Some(6000.0), Ok(2000.0)), Ratio::Measured(3.0));
        assert_eq!(Ratio::Measured(3.0).text(), "3.00 x");
    }

    #[test]
    fn a_missing_peer_gives_no_ratio_and_says_why() {
        let ratio = Ratio::of(Some(6000.0), Err("Node.js is missing"));
        assert_eq!(ratio, Ratio::NoRatio("Node.js is missing".into()));
        assert_eq!(ratio.text(), "no ratio: Node.js is missing");
    }

    #[test]
    fn a_failed_engine_drain_gives_no_ratio() {
        let ratio = Ratio::of(None, Ok(2000.0));
        assert!(matches!(ratio, Ratio::NoRatio(ref why) if why.contains("engine")));
    }

    #[test]
    fn an_unusable_peer_figure_gives_no_ratio() {
        for figure in [0.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                Ratio::of(Some(6000.0), Ok(figure)),
                Ratio::NoRatio(_)
            ));
        }
    }

    fn row(peer: Peer, ratio: Ratio) -> PeerRow {
        PeerRow {
            version: Some(format!("{} 1.0", peer.key())),
            steps_per_s: match ratio {
                Ratio::Measured(r) => Some(3000.0 / r),
                Ratio::NoRatio(_) => None,
            },
            ratio,
            ..PeerRow::new(peer, None)
        }
    }

    fn workload(engine: &[f64], peers: Vec<PeerRow>) -> PeersWorkload {
        PeersWorkload {
            runs: 1000,
            steps_per_run: 4,
            engine_steps_per_s: None,
            engine_samples_steps_per_s: engine.to_vec(),
            engine_failures: Vec::new(),
            peers,
        }
    }

    #[test]
    fn settling_takes_medians_and_keeps_failed_rounds_out_of_them() {
        let mut peer = PeerRow::new(Peer::OpenWorkflow, None);
        peer.samples_steps_per_s = vec![1000.0, 3000.0];
        peer.failures = vec!["round 2: exit status 1".into()];
        let mut w = workload(&[6000.0, 5000.0, 7000.0], vec![peer]);
        w.settle();
        assert_eq!(w.engine_steps_per_s, Some(6000.0));
        // The median of two rounds is the lower one, as for every other row of the report.
        assert_eq!(w.peers[0].steps_per_s, Some(1000.0));
        assert_eq!(w.peers[0].ratio, Ratio::Measured(6.0));
    }

    #[test]
    fn settling_gives_no_ratio_to_a_peer_that_could_not_run_or_always_failed() {
        let missing = PeerRow::new(Peer::OpenWorkflow, Some("Node.js is missing".into()));
        let mut failing = PeerRow::new(Peer::Dbos, None);
        failing.failures = vec!["round 1: boom".into()];
        let silent = PeerRow::new(Peer::Durare, None);
        let mut w = workload(&[6000.0], vec![missing, failing, silent]);
        w.settle();
        assert_eq!(
            w.peers[0].ratio,
            Ratio::NoRatio("Node.js is missing".into())
        );
        assert_eq!(
            w.peers[1].ratio,
            Ratio::NoRatio("every round failed; last: round 1: boom".into())
        );
        assert_eq!(w.peers[2].ratio, Ratio::NoRatio("no round ran".into()));
        assert!(w.peers.iter().all(|row| row.steps_per_s.is_none()));
    }

    #[test]
    fn settling_without_an_engine_figure_gives_no_ratio() {
        let mut peer = PeerRow::new(Peer::OpenWorkflow, None);
        peer.samples_steps_per_s = vec![2000.0];
        let mut w = workload(&[], vec![peer]);
        w.engine_failures = vec!["round 1: timeout".into()];
        w.settle();
        assert_eq!(w.engine_steps_per_s, None);
        assert_eq!(w.peers[0].steps_per_s, Some(2000.0));
        assert!(matches!(w.peers[0].ratio, Ratio::NoRatio(_)));
    }

    #[test]
    fn the_table_shows_measured_ratios_and_says_why_others_are_missing() {
        let result = PeersResult {
            skipped: None,
            concurrency: 100,
            rounds: 3,
            workloads: vec![PeersWorkload {
                engine_steps_per_s: Some(3000.0),
                ..workload(
                    &[2900.0, 3000.0, 3100.0],
                    vec![
                        row(Peer::OpenWorkflow, Ratio::Measured(2.5)),
                        row(
                            Peer::Dbos,
                            Ratio::NoRatio("the Rust peers did not build".into()),
                        ),
                    ],
                )
            }],
        };
        let table = table(&result);
        assert!(table.contains("2900 3000 3100"), "{table}");
        assert!(table.contains("2.50 x"), "{table}");
        assert!(
            table.contains("no ratio: the Rust peers did not build"),
            "{table}"
        );
        assert_eq!(
            result.ratio(Peer::OpenWorkflow, 4),
            Some(&Ratio::Measured(2.5))
        );
        assert_eq!(result.ratio(Peer::OpenWorkflow, 10), None);
        assert_eq!(result.ratio(Peer::Durare, 4), None);
    }

    #[test]
    fn skipped_peers_print_no_ratio_and_no_figure() {
        let result = PeersResult::skipped("--no-peers given");
        let table = table(&result);
        assert_eq!(
            table.trim(),
            "PEERS  no ratio to any peer: --no-peers given"
        );
        assert_eq!(result.ratio(Peer::OpenWorkflow, 4), None);
    }
}
