//! End to end, flow control: per-key concurrency limits under several workers,
//! fairness for a hot key, priorities, on both stores; and the claim's plan on Postgres with
//! 100,000 pending runs over 1,000 keys.

use crate::support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::{Backend, TestStore, client, worker};
use tasks::{ListRuns, RunStatus, SharedStore, StartOptions, WorkflowContext, WorkflowError};
use tasks::{step, workflow};
use uuid::Uuid;

/// The stores of the running tests, by probe id (tests run in parallel in one process).
fn stores() -> &'static Mutex<HashMap<Uuid, SharedStore>> {
    static STORES: OnceLock<Mutex<HashMap<Uuid, SharedStore>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

/// What the runs of a test observed, by probe id: per key, the most running runs of the key
/// seen in the database; and the order in which runs started.
fn observed() -> &'static Mutex<HashMap<Uuid, Observed>> {
    static OBSERVED: OnceLock<Mutex<HashMap<Uuid, Observed>>> = OnceLock::new();
    OBSERVED.get_or_init(Default::default)
}

#[derive(Debug, Default, Clone)]
struct Observed {
    most_running: HashMap<String, usize>,
    started: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Job {
    probe: String,
    key: String,
    label: String,
    millis: u64,
}

/// Counts, from the database, the running runs of this run's key (the key is in the input),
/// and remembers the most.
#[step]
async fn observe(job: &Job) -> Result<(), std::io::Error> {
    let store = stores().lock().unwrap()[&job.probe.parse::<Uuid>().unwrap()].clone();
    let running = store
        .contract()
        .list_runs(ListRuns {
            statuses: vec![RunStatus::Running],
            workflow_name: Some("e2e-flow-job".into()),
            limit: Some(1000),
            ..ListRuns::default()
        })
        .await
        .map_err(std::io::Error::other)?;
    let of_key = running
        .data
        .iter()
        .filter(|run| {
            run.input.as_ref().and_then(|input| input["key"].as_str()) == Some(job.key.as_str())
        })
        .count();
    let mut observed = observed().lock().unwrap();
    let entry = observed
        .entry(job.probe.parse::<Uuid>().unwrap())
        .or_default();
    let most = entry.most_running.entry(job.key.clone()).or_default();
    *most = (*most).max(of_key);
    entry.started.push(job.label.clone());
    Ok(())
}

#[step]
async fn work(job: &Job) -> Result<(), std::io::Error> {
    tokio::time::sleep(Duration::from_millis(job.millis)).await;
    Ok(())
}

/// Observes its key, works, sleeps durably (holding no slot), observes again.
#[workflow(name = "e2e-flow-job")]
async fn flow_job(ctx: WorkflowContext, job: Job) -> Result<(), WorkflowError> {
    observe(&job).await?;
    work(&job).await?;
    ctx.sleep("rest", Duration::from_millis(20)).await?;
    observe(&job).await?;
    Ok(())
}

fn probe(store: &TestStore) -> Uuid {
    let probe = Uuid::new_v4();
    stores().lock().unwrap().insert(probe, store.shared());
    probe
}

fn job(probe: Uuid, key: &str, label: &str, millis: u64) -> Job {
    Job {
        probe: probe.to_string(),
        key: key.into(),
        label: label.into(),
        millis,
    }
}

async fn wait_all(client: &tasks::Client, ids: &[Uuid]) {
    for id in ids {
        client
            .handle::<()>(*id)
            .result_within(Duration::from_secs(120))
            .await
            .unwrap();
    }
}

/// Four workers drain runs of two keys of limit 2: no run ever saw more than two running
/// runs of its key in the database, at its start or after its durable sleep.
async fn key_limit_holds_under_four_workers(backend: Backend) {
    let store = backend.store().await;
    let probe = probe(&store);
    let client = client(&store);
    let mut ids = Vec::new();
    for n in 0..24 {
        let key = if n % 2 == 0 { "even" } else { "odd" };
        let options = StartOptions::new().concurrency_key(key, 2);
        let handle = client
            .start::<flow_job>(job(probe, key, &n.to_string(), 30))
            .options(options)
            .await
            .unwrap();
        ids.push(handle.id());
    }
    let workers: Vec<_> = (0..4)
        .map(|_| {
            // Leases and heartbeats a loaded machine cannot outlast: a run taken over after
            // a lost lease observes twice more, which this count would take for a bug.
            worker(&store)
                .concurrency(4)
                .lease(Duration::from_secs(60))
                .heartbeat_timeout(Duration::from_secs(30))
                .build()
                .unwrap()
                .spawn()
        })
        .collect();
    wait_all(&client, &ids).await;
    for handle in workers {
        handle.shutdown().await;
    }
    let observed = observed().lock().unwrap()[&probe].clone();
    assert_eq!(observed.started.len(), 48, "every run observed twice");
    for key in ["even", "odd"] {
        let most = observed.most_running[key];
        assert!(most <= 2, "key {key} had {most} runs running at once");
        assert!(most >= 1);
    }
}

/// A key with a backlog of 60 runs and limit 1 does not hold up the 4 runs of another key:
/// they finish while most of the backlog still waits.
async fn hot_key_does_not_starve_another(backend: Backend) {
    let store = backend.store().await;
    let probe = probe(&store);
    let client = client(&store);
    let mut hot = Vec::new();
    for n in 0..60 {
        let options = StartOptions::new().concurrency_key("hot", 1);
        let handle = client
            .start::<flow_job>(job(probe, "hot", &format!("hot-{n}"), 20))
            .options(options)
            .await
            .unwrap();
        hot.push(handle.id());
    }
    let mut cold = Vec::new();
    for n in 0..4 {
        let options = StartOptions::new().concurrency_key("cold", 1);
        let handle = client
            .start::<flow_job>(job(probe, "cold", &format!("cold-{n}"), 20))
            .options(options)
            .await
            .unwrap();
        cold.push(handle.id());
    }
    let worker = worker(&store).concurrency(4).build().unwrap().spawn();
    wait_all(&client, &cold).await;
    let done_hot = count_completed(&store, &hot).await;
    assert!(
        done_hot < 30,
        "the cold key's runs waited for the hot key's backlog ({done_hot} of 60 done)"
    );
    wait_all(&client, &hot).await;
    worker.shutdown().await;
    assert!(observed().lock().unwrap()[&probe].most_running["hot"] <= 1);
}

async fn count_completed(store: &TestStore, ids: &[Uuid]) -> usize {
    let mut done = 0;
    for id in ids {
        if store.get_run(*id).await.unwrap().unwrap().status == RunStatus::Completed {
            done += 1;
        }
    }
    done
}

/// One worker with one slot starts queued runs by priority, higher first, then in order.
async fn priorities_order_the_starts(backend: Backend) {
    let store = backend.store().await;
    let probe = probe(&store);
    let client = client(&store);
    let mut ids = Vec::new();
    for (label, priority) in [("low", -1), ("a", 0), ("urgent", 5), ("b", 0), ("high", 1)] {
        let options = StartOptions::new().priority(priority);
        let key = format!("{label}-key");
        let handle = client
            .start::<flow_job>(job(probe, &key, label, 0))
            .options(options)
            .await
            .unwrap();
        ids.push(handle.id());
    }
    let worker = worker(&store).concurrency(1).build().unwrap().spawn();
    wait_all(&client, &ids).await;
    worker.shutdown().await;
    let started = observed().lock().unwrap()[&probe].started.clone();
    // Each run observes at its start; the first observation of each run gives the order.
    let mut firsts = Vec::new();
    for label in started {
        if !firsts.contains(&label) {
            firsts.push(label);
        }
    }
    assert_eq!(firsts, ["urgent", "high", "a", "b", "low"]);
}

every_store!(
    key_limit_holds_under_four_workers,
    hot_key_does_not_starve_another,
    priorities_order_the_starts,
);

/// `EXPLAIN` of the claim with 100,000 pending runs spread over 1,000 keys (two running per
/// key, limit 3) and 1,000 keyless ones: no sequential scan of the runs, and an index path
/// for the keys. The plan is printed (`--nocapture`) and shown in `bench/README.md`.
#[tokio::test]
async fn claim_plan_has_no_sequential_scan_on_a_large_keyed_backlog() {
    let store = tasks_tests::pg_store().await;
    let pool = store.pool();
    let namespace = tasks::store::Store::namespace(&store).to_owned();
    sqlx::query(
        "INSERT INTO tasks.concurrency_keys (namespace, concurrency_key)
         SELECT $1, 'key-' || k FROM generate_series(0, 999) k",
    )
    .bind(&namespace)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO tasks.workflow_runs
             (namespace, id, workflow_name, status, attempts, available_at, created_at,
              updated_at, priority, concurrency_key, concurrency_limit, worker_id)
         SELECT $1, gen_random_uuid(), 'plan', s.status, 0,
                now() - (i || ' milliseconds')::interval + CASE WHEN s.status = 'running'
                    THEN interval '1 hour' ELSE interval '0' END,
                now(), now(), i % 3, CASE WHEN i <= 102000 THEN 'key-' || (i % 1000) END,
                CASE WHEN i <= 102000 THEN 3 END,
                CASE WHEN s.status = 'running' THEN 'someone' END
           FROM generate_series(1, 103000) i,
                LATERAL (SELECT CASE WHEN i > 100000 AND i <= 102000 THEN 'running'
                                     ELSE 'pending' END AS status) s",
    )
    .bind(&namespace)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE tasks.workflow_runs")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE tasks.concurrency_keys")
        .execute(pool)
        .await
        .unwrap();
    let explain = |sql: &'static str, seqscan: bool, plan: Plan| {
        explain_claim(pool, sql, &namespace, 32, None, seqscan, plan)
    };
    // Both statements: the plain claim, which the store uses here (no queue has a limit),
    // and the full one, each planned for these values and generically (the plan the
    // store's claims run on). As the planner chooses: the runs, which grow with the
    // backlog, are read through their indexes. (It may read the key table, a few pages
    // for 1,000 keys, whole: that depends on the statistics of a database shared with
    // other tests.)
    for (sql, kind) in [
        tasks::postgres::__bench::plain_claim_runs_sql(),
        tasks::postgres::__bench::claim_runs_sql(),
    ]
    .into_iter()
    .flat_map(|sql| [(sql, Plan::Custom), (sql, Plan::Generic)])
    {
        let plan = explain(sql, true, kind).await;
        println!("{plan}");
        assert!(
            executed_seq_scans(&plan).is_empty(),
            "a sequential scan of the runs:\n{plan}"
        );
        assert!(plan.contains("workflow_runs_claim_keyed"), "{plan}");
        assert!(plan.contains("workflow_runs_key_running"), "{plan}");
        // And every table the claim reads, the keys too, has an index path: with
        // sequential scans priced out, none is left.
        let indexed = explain(sql, false, kind).await;
        assert!(
            !indexed.contains("Seq Scan"),
            "a table without an index path:\n{indexed}"
        );
    }

    // And the claim takes what the limits allow: one run of each key it reaches (two of
    // three slots are held), keyless runs by priority among them.
    let started = Instant::now();
    let claimed =
        tasks::store::LeaseStore::claim_runs(&store, "plan-worker", Duration::from_secs(60), 32)
            .await
            .unwrap();
    println!("claim of 32 on the backlog: {:?}", started.elapsed());
    assert_eq!(claimed.len(), 32);
    let mut keys = std::collections::HashSet::new();
    for claimed in &claimed {
        let key: Option<String> = sqlx::query_scalar(
            "SELECT concurrency_key FROM tasks.workflow_runs WHERE namespace = $1 AND id = $2",
        )
        .bind(&namespace)
        .bind(claimed.run.id)
        .fetch_one(pool)
        .await
        .unwrap();
        if let Some(key) = key {
            assert!(keys.insert(key), "two runs of one key with one free slot");
        }
    }
    sqlx::query("DELETE FROM tasks.workflow_runs WHERE namespace = $1")
        .bind(&namespace)
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("DELETE FROM tasks.concurrency_keys WHERE namespace = $1")
        .bind(&namespace)
        .execute(pool)
        .await
        .unwrap();
}

/// The claim counts each keyed candidate's slots with `namespace = $1 AND concurrency_key =
/// .. AND status = 'running'`, meant for `workflow_runs_key_running`. Any other partial
/// index on running runs that leads with the namespace could serve that count too, by
/// reading every running run of the namespace per candidate; when the statistics had seen no
/// running run (a backlog enqueued and analyzed before its workers started, as in the
/// benchmark's drain), the planner chose such an index (by queue before migration 0017, by
/// worker before 0018), and a key-per-run claim took several times as long as a keyless one.
/// So every other index on running runs requires its own column in its predicate, which
/// only a query that names that column can use.
#[tokio::test]
async fn no_other_index_on_running_runs_can_count_a_keys_slots() {
    let store = tasks_tests::pg_store().await;
    let indexes: Vec<(String, String, Vec<String>)> = sqlx::query_as(
        "SELECT c.relname::text, pg_get_expr(i.indpred, i.indrelid),
                ARRAY(SELECT a.attname::text
                        FROM unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
                        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                       ORDER BY k.ord)
           FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
          WHERE i.indrelid = 'tasks.workflow_runs'::regclass AND i.indpred IS NOT NULL",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    let running: Vec<_> = indexes
        .iter()
        .filter(|(_, predicate, _)| predicate.contains("status = 'running'::text"))
        .collect();
    assert!(
        running
            .iter()
            .any(|(name, _, _)| name == "workflow_runs_key_running"),
        "{indexes:?}"
    );
    for (name, predicate, columns) in running {
        assert_eq!(columns[0], "namespace", "{name}");
        let column = &columns[1];
        assert!(
            predicate.contains(&format!("({column} IS NOT NULL)")),
            "{name} ({columns:?}) WHERE {predicate}: a count of a key's running runs could \
             read it whole"
        );
    }
}

/// Which plan of a claim statement to explain.
#[derive(Debug, Clone, Copy)]
enum Plan {
    /// Planned with the parameters' values, as an unnamed statement is.
    Custom,
    /// The generic plan of the prepared statement, which the store's claims run on
    /// (`plan_cache_mode = force_generic_plan` in the claim's transaction).
    Generic,
}

/// `EXPLAIN (ANALYZE)` of a claim statement (`sql`, from `__bench`) of `batch` runs of
/// `namespace` by a worker serving `queues` (`None`: every queue), in a transaction that is
/// rolled back, with the `plan` asked for; with `seqscan` false, sequential scans are
/// priced out. The plan's lines.
async fn explain_claim(
    pool: &sqlx::PgPool,
    sql: &str,
    namespace: &str,
    batch: u32,
    queues: Option<Vec<String>>,
    seqscan: bool,
    plan: Plan,
) -> String {
    let mut tx = pool.begin().await.unwrap();
    if !seqscan {
        sqlx::query("SET LOCAL enable_seqscan = off")
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    let deadline = serde_json::json!({ "kind": "deadline" });
    let keyed = tasks::postgres::__bench::claim_keyed_candidates(batch);
    let lines: Vec<String> = match plan {
        Plan::Custom => {
            sqlx::query_scalar(&format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {sql}"))
                .bind(namespace)
                .bind("plan-worker")
                .bind(60_000_i64)
                .bind(i64::from(batch))
                .bind(deadline)
                .bind(keyed)
                .bind(queues)
                .bind(None::<Vec<String>>)
                .fetch_all(&mut *tx)
                .await
                .unwrap()
        }
        Plan::Generic => {
            // `EXECUTE` takes no bound parameters: its arguments come from settings of this
            // transaction, which are. A prepared statement is session state, kept past the
            // rollback: removed below.
            sqlx::query(
                "SELECT set_config('tasks_plan.namespace', $1, true),
                        set_config('tasks_plan.batch', $2, true),
                        set_config('tasks_plan.deadline', $3, true),
                        set_config('tasks_plan.keyed', $4, true),
                        set_config('tasks_plan.queues', $5, true),
                        set_config('plan_cache_mode', 'force_generic_plan', true)",
            )
            .bind(namespace)
            .bind(batch.to_string())
            .bind(deadline.to_string())
            .bind(keyed.to_string())
            .bind(queues.map(|queues| queues.join(",")).unwrap_or_default())
            .execute(&mut *tx)
            .await
            .unwrap();
            sqlx::raw_sql(&format!(
                "PREPARE generic_claim (text, text, bigint, bigint, jsonb, bigint, text[], \
                 text[]) AS {sql}"
            ))
            .execute(&mut *tx)
            .await
            .unwrap();
            let lines: Vec<String> = sqlx::query_scalar(
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF)
                 EXECUTE generic_claim(
                     current_setting('tasks_plan.namespace'), 'plan-worker', 60000,
                     current_setting('tasks_plan.batch')::bigint,
                     current_setting('tasks_plan.deadline')::jsonb,
                     current_setting('tasks_plan.keyed')::bigint,
                     string_to_array(nullif(current_setting('tasks_plan.queues'), ''), ','),
                     NULL)",
            )
            .fetch_all(&mut *tx)
            .await
            .unwrap();
            sqlx::raw_sql("DEALLOCATE generic_claim")
                .execute(&mut *tx)
                .await
                .unwrap();
            // A generic plan shows the parameters where a custom one shows their values.
            assert!(
                lines.iter().any(|line| line.contains("$4")),
                "not the generic plan:\n{}",
                lines.join("\n")
            );
            lines
        }
    };
    tx.rollback().await.unwrap();
    lines.join("\n")
}

/// The lines of an `EXPLAIN ANALYZE` plan that read the runs by a sequential scan and ran.
/// The claim has two variants of some scans, gated on whether the namespace has a queue with
/// a limit; the one that does not apply shows as "never executed".
fn executed_seq_scans(plan: &str) -> Vec<&str> {
    plan.lines()
        .filter(|line| line.contains("Seq Scan on workflow_runs"))
        .filter(|line| !line.contains("never executed"))
        .collect()
}

/// `EXPLAIN` of the claim with 100,000 pending runs and no key at all (the benchmark's
/// keyless backlog): the keyed part of the claim must still read the (empty) index of keyed
/// runs, not every pending run. A join in that part once let the planner prefer a
/// sequential scan and a sort of the whole backlog (a claim took 50 ms instead of 9 ms).
#[tokio::test]
async fn claim_plan_has_no_sequential_scan_on_a_large_keyless_backlog() {
    let store = tasks_tests::pg_store().await;
    let pool = store.pool();
    let namespace = tasks::store::Store::namespace(&store).to_owned();
    sqlx::query(
        "INSERT INTO tasks.workflow_runs
             (namespace, id, workflow_name, status, attempts, available_at, created_at,
              updated_at)
         SELECT $1, gen_random_uuid(), 'plan', 'pending', 0,
                now() - (i || ' milliseconds')::interval, now(), now()
           FROM generate_series(1, 100000) i",
    )
    .bind(&namespace)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE tasks.workflow_runs")
        .execute(pool)
        .await
        .unwrap();
    // The plain claim (the store's here), the full one, and the plain one of a worker that
    // serves the default queue only. Every run is in that queue, so the planner may read
    // the latter's runs through either index of keyless pending runs: in claim order both.
    let served = Some(vec![tasks::DEFAULT_QUEUE.to_owned()]);
    let free: &[&str] = &["workflow_runs_claim_free"];
    let either: &[&str] = &["workflow_runs_claim_queue", "workflow_runs_claim_free"];
    for (sql, queues, indexes, kind) in [
        (tasks::postgres::__bench::plain_claim_runs_sql(), None, free),
        (tasks::postgres::__bench::claim_runs_sql(), None, free),
        (
            tasks::postgres::__bench::plain_claim_runs_by_queue_sql(),
            served,
            either,
        ),
    ]
    .into_iter()
    .flat_map(|(sql, queues, indexes)| {
        [Plan::Custom, Plan::Generic].map(|kind| (sql, queues.clone(), indexes, kind))
    }) {
        let plan = explain_claim(pool, sql, &namespace, 10, queues, true, kind).await;
        println!("{plan}");
        assert!(
            executed_seq_scans(&plan).is_empty(),
            "a sequential scan of the runs:\n{plan}"
        );
        // The keyless runs come from an index scan in claim order that stops at the batch:
        // it reads about as many rows as the claim takes, not the backlog.
        let scan = plan
            .lines()
            .find(|line| {
                indexes
                    .iter()
                    .any(|index| line.contains(&format!("Index Scan using {index} ")))
            })
            .unwrap_or_else(|| panic!("no scan of {indexes:?}:\n{plan}"));
        let read: f64 = scan
            .split("actual rows=")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|rows| rows.parse().ok())
            .unwrap_or_else(|| panic!("no row count in {scan:?}"));
        assert!(read <= 100.0, "the scan read {read} rows:\n{plan}");
    }
    let claimed =
        tasks::store::LeaseStore::claim_runs(&store, "plan-worker", Duration::from_secs(60), 10)
            .await
            .unwrap();
    assert_eq!(claimed.len(), 10);
    sqlx::query("DELETE FROM tasks.workflow_runs WHERE namespace = $1")
        .bind(&namespace)
        .execute(pool)
        .await
        .unwrap();
}

/// `EXPLAIN` of both claim statements (every queue, and chosen queues) with 100,000 pending
/// runs over 10 queues, three of them limited (one by concurrency with two slots held, one by
/// rate, one by rate and concurrency per key), a few hundred with keys: no sequential scan of the runs, the limited queues read
/// through the index by queue, their held slots through the index on running runs by
/// queue. Then claims take what the limits allow.
#[tokio::test]
async fn claim_plan_with_queues_has_no_sequential_scan() {
    let store = tasks_tests::pg_store().await;
    let pool = store.pool();
    let namespace = tasks::store::Store::namespace(&store).to_owned();
    sqlx::query(
        "INSERT INTO tasks.workflow_runs
             (namespace, id, workflow_name, status, attempts, available_at, created_at,
              updated_at, priority, concurrency_key, concurrency_limit, worker_id, queue)
         SELECT $1, gen_random_uuid(), 'plan', s.status, 0,
                now() - (i || ' milliseconds')::interval + CASE WHEN s.status = 'running'
                    THEN interval '1 hour' ELSE interval '0' END,
                now(), now(), i % 3, CASE WHEN i % 500 = 0 THEN 'key-' || (i % 7) END,
                CASE WHEN i % 500 = 0 THEN 2 END,
                CASE WHEN s.status = 'running' THEN 'someone' END,
                'q-' || (i % 10)
           FROM generate_series(1, 100020) i,
                LATERAL (SELECT CASE WHEN i > 100000 AND i % 10 = 1 THEN 'running'
                                     ELSE 'pending' END AS status) s",
    )
    .bind(&namespace)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO tasks.concurrency_keys (namespace, concurrency_key)
         SELECT $1, 'key-' || k FROM generate_series(0, 6) k",
    )
    .bind(&namespace)
    .execute(pool)
    .await
    .unwrap();
    tasks::store::QueueStore::put_queue(&store, &tasks::QueueOptions::new("q-1").concurrency(3))
        .await
        .unwrap();
    tasks::store::QueueStore::put_queue(
        &store,
        &tasks::QueueOptions::new("q-2").rate_limit(5, Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    // Every run with a key is in q-0: one start per key and hour, and one run of each key
    // at once (below the runs' own limit of 2).
    tasks::store::QueueStore::put_queue(
        &store,
        &tasks::QueueOptions::new("q-0")
            .rate_limit_per_key(1, Duration::from_secs(3600))
            .concurrency_per_key(1),
    )
    .await
    .unwrap();
    for table in [
        "tasks.workflow_runs",
        "tasks.queues",
        "tasks.concurrency_keys",
    ] {
        sqlx::query(&format!("ANALYZE {table}"))
            .execute(pool)
            .await
            .unwrap();
    }
    let explain = |sql: &'static str, queues: Option<Vec<String>>, seqscan: bool, plan: Plan| {
        explain_claim(pool, sql, &namespace, 32, queues, seqscan, plan)
    };
    let served = Some(vec!["q-1".to_owned(), "q-3".to_owned()]);
    for (sql, queues, kind) in [
        (tasks::postgres::__bench::claim_runs_sql(), None),
        (
            tasks::postgres::__bench::claim_runs_by_queue_sql(),
            served.clone(),
        ),
    ]
    .into_iter()
    .flat_map(|(sql, queues)| [Plan::Custom, Plan::Generic].map(|kind| (sql, queues.clone(), kind)))
    {
        let plan = explain(sql, queues.clone(), true, kind).await;
        println!("{plan}");
        assert!(
            executed_seq_scans(&plan).is_empty(),
            "a sequential scan of the runs:\n{plan}"
        );
        assert!(plan.contains("workflow_runs_claim_queue"), "{plan}");
        assert!(plan.contains("workflow_runs_queue_running"), "{plan}");
        let indexed = explain(sql, queues, false, kind).await;
        assert!(
            !indexed.contains("Seq Scan"),
            "a table without an index path:\n{indexed}"
        );
    }

    // The claims take what the limits allow: one more of q-1 (two of three slots are held),
    // five starts of q-2, and only served queues when chosen.
    let mut taken: HashMap<String, usize> = HashMap::new();
    for _ in 0..4 {
        let started = Instant::now();
        let claimed = tasks::store::LeaseStore::claim_runs(
            &store,
            "plan-worker",
            Duration::from_secs(60),
            32,
        )
        .await
        .unwrap();
        println!("claim of 32 on the queued backlog: {:?}", started.elapsed());
        assert_eq!(claimed.len(), 32);
        for claimed in claimed {
            *taken.entry(claimed.run.queue).or_default() += 1;
        }
    }
    assert_eq!(taken.get("q-1").copied().unwrap_or(0), 1, "{taken:?}");
    assert_eq!(taken.get("q-2").copied().unwrap_or(0), 5, "{taken:?}");
    let most_per_key: Option<i64> = sqlx::query_scalar(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM tasks.workflow_runs
                              WHERE namespace = $1 AND worker_id = 'plan-worker'
                                AND concurrency_key IS NOT NULL
                              GROUP BY concurrency_key) k",
    )
    .bind(&namespace)
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(
        most_per_key.unwrap_or(0) <= 1,
        "{most_per_key:?} starts of one key"
    );
    let filter = tasks::store::ClaimFilter {
        queues: served,
        workflows: None,
    };
    let claimed = tasks::store::LeaseStore::claim_runs_filtered(
        &store,
        "plan-worker",
        Duration::from_secs(60),
        32,
        &filter,
    )
    .await
    .unwrap();
    assert_eq!(claimed.len(), 32);
    assert!(claimed.iter().all(|claimed| claimed.run.queue == "q-3"));
    for table in [
        "tasks.workflow_runs",
        "tasks.concurrency_keys",
        "tasks.queues",
    ] {
        sqlx::query(&format!("DELETE FROM {table} WHERE namespace = $1"))
            .bind(&namespace)
            .execute(pool)
            .await
            .unwrap();
    }
}
