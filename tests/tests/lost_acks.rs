//! End to end on Postgres: a write that commits but whose acknowledgement never reaches the
//! worker. The worker's connections go through a proxy that, for many executions of the
//! statements that write a step attempt or complete a run, lets the server commit one and
//! then closes the connection instead of forwarding the answer: exactly what a server
//! restart, a failover or a network cut between the commit and its acknowledgement does.
//! The worker retries each such write on a fresh connection.
//!
//! Every path that records a step is covered: steps recorded in the shared batch, a run
//! completed with its last steps in one statement, a child's completion (which records its
//! steps separately, then completes), a durable sleep, an event wait (with events sent
//! before and after the wait, twice under one dedup key), and a publication of state. Each
//! step must be recorded exactly once, and each step body must run exactly once.

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use support::{Backend, bump, calls, client};
use tasks::postgres::PgStore;
use tasks::{
    Event, RunStatus, SharedStore, StepStatus, Worker, WorkflowContext, WorkflowError, step,
    workflow,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

// ---- The proxy ----

/// Whether a statement's acknowledgement may be dropped: it writes a step attempt or
/// completes a run.
fn droppable(sql: &str) -> bool {
    sql.contains("INSERT INTO tasks.step_attempts")
        || sql.contains("UPDATE tasks.step_attempts")
        || sql.contains("status = 'completed'")
}

/// A TCP proxy in front of the test database that drops, after its commit, the
/// acknowledgement of the first execution of each droppable statement, and of every third
/// one after that which comes at least [`SPACING`] after the last drop, up to [`MOST_DROPS`].
struct AckDropper {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// Executions seen per statement text.
    executions: Mutex<HashMap<String, usize>>,
    /// The statements whose acknowledgement was dropped, in order.
    dropped: Mutex<Vec<String>>,
    connections: AtomicUsize,
    /// When the last acknowledgement was doomed.
    last_drop: Mutex<Option<std::time::Instant>>,
}

/// The least time between two dropped acknowledgements, but for the first of a statement.
const SPACING: Duration = Duration::from_millis(500);

/// How many acknowledgements are dropped at most, but for the first of each statement.
const MOST_DROPS: usize = 16;

impl AckDropper {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let accepting = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                accepting.connections.fetch_add(1, Ordering::Relaxed);
                let shared = Arc::clone(&accepting);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        relay(client, server, shared).await;
                    }
                });
            }
        });
        AckDropper { addr, shared }
    }

    fn dropped(&self) -> Vec<String> {
        self.shared.dropped.lock().unwrap().clone()
    }
}

/// One protocol message: its type byte (0 for the untyped startup message) and its bytes.
struct Frame {
    kind: u8,
    bytes: Vec<u8>,
}

/// Takes the complete messages off the front of `buffer`.
fn frames(buffer: &mut Vec<u8>, startup: &mut bool) -> Vec<Frame> {
    let mut out = Vec::new();
    loop {
        let (kind, header) = if *startup {
            (0, 0)
        } else {
            (buffer.first().copied().unwrap_or(0), 1)
        };
        if buffer.len() < header + 4 {
            return out;
        }
        let length = u32::from_be_bytes(buffer[header..header + 4].try_into().unwrap()) as usize;
        let total = header + length;
        if buffer.len() < total {
            return out;
        }
        let bytes: Vec<u8> = buffer.drain(..total).collect();
        *startup = false;
        out.push(Frame { kind, bytes });
    }
}

/// The NUL-terminated strings at the start of a message body.
fn strings(body: &[u8], n: usize) -> Vec<String> {
    body.split(|&b| b == 0)
        .take(n)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// What one connection knows: its prepared statements, and whether the answer to the
/// statement in flight is to be dropped.
#[derive(Default)]
struct Connection {
    statements: HashMap<String, String>,
    /// The droppable statements of the transaction whose acknowledgement is to be dropped.
    doomed: Vec<String>,
}

async fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let connection = Arc::new(Mutex::new(Connection::default()));
    let upstream = {
        let (connection, shared) = (Arc::clone(&connection), Arc::clone(&shared));
        async move {
            let (mut buffer, mut startup, mut chunk) = (Vec::new(), true, vec![0u8; 16 * 1024]);
            loop {
                let n = match client_read.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                buffer.extend_from_slice(&chunk[..n]);
                for frame in frames(&mut buffer, &mut startup) {
                    // Decided before the server sees the statement.
                    {
                        let body = frame.bytes.get(5..).unwrap_or_default();
                        let mut connection = connection.lock().unwrap();
                        let executed = match frame.kind {
                            b'P' => {
                                let parts = strings(body, 2);
                                connection
                                    .statements
                                    .insert(parts[0].clone(), parts[1].clone());
                                None
                            }
                            b'B' => connection.statements.get(&strings(body, 2)[1]).cloned(),
                            b'Q' => Some(strings(body, 1).remove(0)),
                            _ => None,
                        };
                        if let Some(sql) = executed.filter(|sql| droppable(sql)) {
                            let mut executions = shared.executions.lock().unwrap();
                            let count = executions.entry(sql.clone()).or_insert(0);
                            *count += 1;
                            let mut last = shared.last_drop.lock().unwrap();
                            let spaced = last.is_none_or(|at| at.elapsed() >= SPACING);
                            let budget = shared.dropped.lock().unwrap().len() < MOST_DROPS;
                            // The first execution of every statement, then every third one
                            // that comes long enough after the last drop that the retries of
                            // a dropped write go through (a dropped batch fails the writes
                            // of every run in it, and their retries fall into one batch).
                            if !connection.doomed.is_empty() {
                                // In the doomed transaction: its write's acknowledgement (the
                                // commit's) is the one dropped.
                                connection.doomed.push(sql);
                            } else if *count == 1 || (*count % 3 == 1 && spaced && budget) {
                                connection.doomed.push(sql);
                                *last = Some(std::time::Instant::now());
                            }
                        }
                    }
                    if server_write.write_all(&frame.bytes).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let downstream = async move {
        let (mut buffer, mut startup, mut chunk) = (Vec::new(), false, vec![0u8; 16 * 1024]);
        let mut held: Vec<u8> = Vec::new();
        loop {
            let n = match server_read.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buffer.extend_from_slice(&chunk[..n]);
            for frame in frames(&mut buffer, &mut startup) {
                let doomed = connection.lock().unwrap().doomed.clone();
                if doomed.is_empty() {
                    if client_write.write_all(&frame.bytes).await.is_err() {
                        return;
                    }
                    continue;
                }
                held.extend_from_slice(&frame.bytes);
                if frame.kind != b'Z' {
                    continue;
                }
                if frame.bytes.get(5) == Some(&b'I') {
                    // Committed (or rolled back) and idle: the answer never arrives.
                    shared.dropped.lock().unwrap().extend(doomed);
                    return;
                }
                // Inside a transaction: answer, and drop the acknowledgement of its end.
                if client_write.write_all(&held).await.is_err() {
                    return;
                }
                held.clear();
            }
        }
    };
    // Whichever side ends first closes both: the client sees its connection fail.
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}

// ---- The workflows ----

fn run_id() -> tasks::uuid::Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

#[step]
async fn lost_ack_first(n: u64) -> Result<u64, std::io::Error> {
    bump(run_id(), "first");
    Ok(n + 1)
}

#[step]
async fn lost_ack_second(n: u64) -> Result<u64, std::io::Error> {
    bump(run_id(), "second");
    Ok(n * 2)
}

/// Two steps, then it returns: the batch recorder, then the batched completion.
#[workflow(name = "lost-acks-steps")]
async fn steps(_ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let a = lost_ack_first(n).await?;
    Ok(lost_ack_second(a).await?)
}

/// A child: two steps, then it returns (its steps are recorded separately, then it
/// completes, and its completion wakes its parent).
#[workflow(name = "lost-acks-child")]
async fn child(_ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let a = lost_ack_first(n).await?;
    Ok(lost_ack_second(a).await?)
}

/// Two children, joined.
#[workflow(name = "lost-acks-parent")]
async fn parent(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let left = ctx.spawn_child::<child>(n).await?;
    let right = ctx.spawn_child::<child>(n + 10).await?;
    let mut sum = 0;
    for result in ctx.join_all(&[left, right]).await {
        sum += result?;
    }
    Ok(sum)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Ping {
    n: u64,
}

impl Event for Ping {
    const TOPIC: &'static str = "lost-acks-ping";
}

/// A step, a durable sleep, two event waits, a publication, a step.
#[workflow(name = "lost-acks-composed", events(Ping))]
async fn composed(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let a = lost_ack_first(n).await?;
    ctx.sleep("nap", Duration::from_millis(50)).await?;
    let early = ctx.wait_for_event::<Ping>().await?;
    ctx.set_state("progress", &a).await?;
    let late = ctx.wait_for_event::<Ping>().await?;
    Ok(lost_ack_second(a + early.n + late.n).await?)
}

// ---- The test ----

fn upstream() -> SocketAddr {
    let options = tasks_tests::connect_options();
    let host = match options.get_host() {
        "localhost" => "127.0.0.1",
        host => host,
    };
    format!("{host}:{}", options.get_port()).parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_is_recorded_once_when_acknowledgements_are_lost() {
    let store = Backend::Postgres.store().await;
    let client = client(&store);
    let proxy = AckDropper::start(upstream()).await;
    let options: PgConnectOptions = tasks_tests::connect_options()
        .host("127.0.0.1")
        .port(proxy.addr.port())
        .ssl_mode(PgSslMode::Disable);
    let pool = PgStore::pool_options()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options)
        .await
        .unwrap();
    let proxied = PgStore::new(pool)
        .with_namespace(store.namespace())
        .unwrap();
    let worker = Worker::builder(SharedStore::new(proxied))
        .concurrency(8)
        .lease(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .shutdown_grace(Duration::from_secs(10))
        .build()
        .unwrap()
        .spawn();

    let mut plain = Vec::new();
    for n in 0..3 {
        plain.push((steps::start(&client, n).await.unwrap(), (n + 1) * 2));
    }
    let mut parents = Vec::new();
    for n in 0..2 {
        let expected = (n + 1) * 2 + (n + 11) * 2;
        parents.push((parent::start(&client, n).await.unwrap(), expected));
    }
    let mut composite = Vec::new();
    for n in 0..2 {
        let run = composed::start(&client, n).await.unwrap();
        // The first event before the wait, sent twice under one dedup key.
        for _ in 0..2 {
            client
                .send_event(run.id(), &Ping { n: 100 })
                .dedup_key(format!("early-{n}"))
                .await
                .unwrap();
        }
        composite.push((run, n));
    }
    // The second once the run published its state (it is past the first wait), twice.
    for (run, n) in &composite {
        let published = eventually!(
            Duration::from_secs(60),
            client.get_state::<u64>(run.id(), "progress").await.unwrap()
        );
        assert_eq!(published.value, n + 1);
        for _ in 0..2 {
            client
                .send_event(run.id(), &Ping { n: 1000 })
                .dedup_key(format!("late-{n}"))
                .await
                .unwrap();
        }
    }

    let within = Duration::from_secs(60);
    for (run, expected) in plain.iter().chain(&parents) {
        assert_eq!(run.result_within(within).await.unwrap(), *expected);
    }
    for (run, n) in &composite {
        assert_eq!(
            run.result_within(within).await.unwrap(),
            (n + 1 + 100 + 1000) * 2
        );
    }
    worker.shutdown().await;

    // Every run, and every child, recorded each of its steps exactly once, and ran each step
    // body once.
    let listing = tasks::ListRuns {
        limit: Some(100),
        ..Default::default()
    };
    let all = store.list_runs(listing).await.unwrap().data;
    assert_eq!(all.len(), 3 + 2 * 3 + 2, "every run and child is listed");
    for run in &all {
        assert_eq!(run.status, RunStatus::Completed, "run {run:?}");
        let history = store.step_history(run.id).await.unwrap();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for step in &history {
            *seen.entry(step.step_name.as_str()).or_default() += 1;
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "run {} ({}) recorded steps more than once: {twice:?}\n{history:#?}",
            run.id,
            run.workflow_name
        );
        assert!(
            history
                .iter()
                .all(|step| step.status == StepStatus::Completed),
            "{history:#?}"
        );
        if run.workflow_name != "lost-acks-parent" {
            assert_eq!(calls(run.id, "first"), 1, "run {}", run.id);
            assert_eq!(calls(run.id, "second"), 1, "run {}", run.id);
        }
    }

    // Every path ran through the proxy, and each of its statements had an acknowledgement
    // dropped (the first execution of a statement always is).
    let flat = |sql: &str| sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let executed: Vec<String> = proxy
        .shared
        .executions
        .lock()
        .unwrap()
        .keys()
        .map(|sql| flat(sql))
        .collect();
    let dropped: Vec<String> = proxy.dropped().iter().map(|sql| flat(sql)).collect();
    let paths = [
        ("the batch record", "INSERT INTO tasks.step_attempts AS sa"),
        (
            "the single-row record",
            "output, error, args, started_at, finished_at, created_at, updated_at) SELECT $1",
        ),
        ("the batched completion", "WITH targets AS MATERIALIZED"),
        (
            "a child's completion",
            "done AS (UPDATE tasks.workflow_runs SET status = 'completed'",
        ),
        ("a durable sleep's start", "'running', $7, $8"),
        (
            "a durable sleep's end",
            "UPDATE tasks.step_attempts sa SET status = 'completed'",
        ),
        ("a child's start", "child_workflow_run_id, started_at"),
        (
            "an event wait's start",
            "kind, status, config, started_at, created_at, updated_at) VALUES",
        ),
        (
            "an event wait's end",
            "UPDATE tasks.step_attempts SET status = 'completed', output = $3",
        ),
        (
            "a publication of state",
            "status, config, output, started_at, finished_at, created_at, updated_at) VALUES",
        ),
    ];
    for (path, text) in paths {
        assert!(
            executed.iter().any(|sql| sql.contains(text)),
            "{path} never ran: {executed:#?}"
        );
    }
    for sql in &executed {
        assert!(
            dropped.contains(sql),
            "no acknowledgement was dropped for {sql}"
        );
    }
}
