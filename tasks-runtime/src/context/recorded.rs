//! Values a workflow may not compute for itself, recorded and replayed:
//! [`WorkflowContext::now`], [`WorkflowContext::random_u64`], [`WorkflowContext::rng`] and
//! [`WorkflowContext::uuid`].
//!
//! Workflow code runs again from the top on every replay, so a clock read, a random number
//! or a fresh id taken there would differ from one execution to the next and send the
//! replay down another path than the first execution. Each of these calls is a call of the
//! workflow like a step: it resolves a name in call order (`ctx.now`, `ctx.now:1`, ...), and
//! its value is recorded as a completed attempt of kind [`StepKind::Function`] under that
//! name, with the value as its output and the call's identity (a path such as
//! `tasks::WorkflowContext::now`) in its config. A replay hands the recorded value back.
//!
//! The record is *held* like a completed step's (see [`crate::session`]): it is written
//! with the run's next write (the next step, sleep, event wait, publication, or the run's
//! completion), so a value costs no commit of its own. A value is durable before anything it
//! could have led to leaves the run: a crash before that write loses a value nobody outside
//! the execution has seen, and the next execution draws a new one.
//!
//! Inside a `#[step]` body the step is the unit that is recorded, so these calls return a
//! fresh value there, unrecorded: a retry of the step draws again, and a replay returns the
//! step's recorded output without running its body.

use chrono::{DateTime, SubsecRound as _, Utc};
use rand::SeedableRng as _;
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use uuid::Uuid;

use super::WorkflowContext;
use super::steps::in_step_body;
use crate::failure::{ErrorRecord, WorkflowError};
use crate::model::StepKind;
use crate::replay::{Call, Resolved};
use crate::session::Halt;

/// One kind of recorded value: its base name, its identity, and how it is drawn, stored and
/// read back.
struct Recorded<T> {
    base: &'static str,
    path: &'static str,
    signature: &'static str,
    draw: fn(&WorkflowContext) -> T,
    encode: fn(&T) -> Value,
    decode: fn(&Value) -> Option<T>,
}

const NOW: Recorded<DateTime<Utc>> = Recorded {
    base: "ctx.now",
    path: "tasks::WorkflowContext::now",
    signature: "() -> DateTime<Utc>",
    // Microseconds, the precision of every store's timestamps: a value written to the
    // database by a step reads back equal.
    draw: |ctx| ctx.database_now().trunc_subsecs(6),
    encode: |now| json!(now.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
    decode: |value| {
        DateTime::parse_from_rfc3339(value.as_str()?)
            .ok()
            .map(|at| at.with_timezone(&Utc))
    },
};

const RANDOM_U64: Recorded<u64> = Recorded {
    base: "ctx.random",
    path: "tasks::WorkflowContext::random_u64",
    signature: "() -> u64",
    draw: |_| rand::random(),
    // A decimal string: JSON readers that hold numbers as doubles (a browser, jq) would
    // round a value past 2^53.
    encode: |value| json!(value.to_string()),
    decode: |value| value.as_str()?.parse().ok(),
};

const RNG_SEED: Recorded<[u8; 32]> = Recorded {
    base: "ctx.rng",
    path: "tasks::WorkflowContext::rng",
    signature: "() -> ChaCha8Rng",
    draw: |_| rand::random(),
    encode: |seed| json!(hex(seed)),
    decode: |value| unhex(value.as_str()?),
};

const UUID: Recorded<Uuid> = Recorded {
    base: "ctx.uuid",
    path: "tasks::WorkflowContext::uuid",
    signature: "() -> Uuid",
    draw: |ctx| uuid_v7_at(ctx.database_now()),
    encode: |id| json!(id.hyphenated().to_string()),
    decode: |value| value.as_str()?.parse().ok(),
};

impl WorkflowContext {
    /// The current time, recorded: the first execution reads the clock, every replay
    /// returns what it read. Use it instead of `Utc::now()` in workflow code, whose result
    /// would change from one replay to the next.
    ///
    /// The clock is the store's (Postgres's `now()`, or the clock a SQLite or in-memory
    /// store was given): the time of the run's claim plus the time elapsed since, so it
    /// agrees with the instants the store writes and, under the
    /// [testing kit](crate::testing), follows its virtual clock. It has microsecond
    /// precision, like the stores' timestamps.
    ///
    /// ```no_run
    /// # async fn demo(ctx: tasks_runtime::WorkflowContext) -> Result<(), tasks_runtime::WorkflowError> {
    /// let started = ctx.now().await?;
    /// ctx.sleep("cool-down", std::time::Duration::from_secs(3600)).await?;
    /// let woke = ctx.now().await?; // after the sleep: at least an hour later
    /// assert!(woke - started >= tasks_runtime::chrono::TimeDelta::hours(1));
    /// # Ok(()) }
    /// ```
    ///
    /// Each call is recorded under its own name (`ctx.now`, `ctx.now:1`, ...) and counts
    /// as a call of the run, like a step. The record costs no commit of its own: like a
    /// completed step's, it is written with the run's next write. Inside a `#[step]` body
    /// it returns the time unrecorded: the step's output is the record.
    ///
    /// Errors: the run's [step limit](crate::WorkerBuilder::max_steps_per_run), or code
    /// that no longer matches the run's history ([`NonDeterminism`](crate::NonDeterminism)),
    /// fail the run, as for a step.
    pub async fn now(&self) -> Result<DateTime<Utc>, WorkflowError> {
        self.recorded(&NOW).await
    }

    /// A random `u64`, recorded: drawn from the operating system's generator by the first
    /// execution, the same on every replay. For more than a few numbers, take one
    /// [`rng`](Self::rng) instead: one record for any number of draws.
    ///
    /// It is stored as a decimal string, so that the history view shows it exactly. Inside
    /// a `#[step]` body it returns a fresh number, unrecorded. Errors as for
    /// [`now`](Self::now).
    pub async fn random_u64(&self) -> Result<u64, WorkflowError> {
        self.recorded(&RANDOM_U64).await
    }

    /// A seeded random generator, whose seed is recorded: any number of draws for one
    /// record, the same sequence on every replay. The first execution draws a 256-bit seed
    /// from the operating system's generator.
    ///
    /// ```no_run
    /// # async fn demo(ctx: tasks_runtime::WorkflowContext) -> Result<(), tasks_runtime::WorkflowError> {
    /// use tasks_runtime::rand::Rng as _;
    ///
    /// let mut rng = ctx.rng().await?;
    /// let jitter_ms: u64 = rng.random_range(0..1_000);
    /// let coin: bool = rng.random();
    /// # let _ = (jitter_ms, coin); Ok(()) }
    /// ```
    ///
    /// The generator is ChaCha8 (`rand_chacha`), whose output for a seed is fixed across
    /// versions and platforms, so an upgrade of the crate does not change what a replay
    /// draws (the `rand` crate's `StdRng` makes no such promise); it is not a generator for
    /// keys or secrets. It implements the traits of [`rand`] 0.9, re-exported
    /// here so that your `Rng` trait is the one it implements.
    ///
    /// Draw in the same order on every replay: a generator shared between branches
    /// ([`spawn`](Self::spawn)), whose interleaving varies, gives each branch different
    /// numbers from one replay to the next; take one generator per branch. Inside a
    /// `#[step]` body it returns a freshly seeded generator, unrecorded. Errors as for
    /// [`now`](Self::now).
    pub async fn rng(&self) -> Result<ChaCha8Rng, WorkflowError> {
        self.recorded(&RNG_SEED).await.map(ChaCha8Rng::from_seed)
    }

    /// A new UUID, recorded: the first execution makes it, every replay returns it. Use it
    /// for an id the workflow hands to the outside world (an order number, the idempotency
    /// key of a payment step), which must not change when the run replays.
    ///
    /// It is a version 7 UUID, as the store's own ids are: its first 48 bits are the
    /// milliseconds of [`now`](Self::now)'s clock and the rest is random, so the ids a
    /// workflow makes sort by when they were made and keep a database index that holds them
    /// compact. Its time part follows the store's clock (and the testing kit's virtual
    /// clock). Inside a `#[step]` body it returns a fresh UUID, unrecorded. Errors as for
    /// [`now`](Self::now).
    pub async fn uuid(&self) -> Result<Uuid, WorkflowError> {
        self.recorded(&UUID).await
    }

    /// The value of the next call of `kind`: the recorded one on replay, else a new one,
    /// held for the run's next write.
    async fn recorded<T>(&self, kind: &Recorded<T>) -> Result<T, WorkflowError> {
        if in_step_body() {
            return Ok((kind.draw)(self));
        }
        let call = Call {
            kind: StepKind::Function,
            path: Some(kind.path),
            signature: Some(kind.signature),
        };
        let Resolved {
            name: step_name,
            record: call,
        } = self.resolve_call(kind.base, call)?;
        self.check_interrupted().await;
        if let Some(done) = self.completed_attempt(&step_name) {
            let stored = done.output.unwrap_or(Value::Null);
            return match (kind.decode)(&stored) {
                Some(value) => Ok(value),
                None => {
                    let record = ErrorRecord::new(format!(
                        "the value recorded by {step_name} cannot be read back: {stored}"
                    ))
                    .with_kind("replay")
                    .non_retryable();
                    self.halt(Halt::Fail(record)).await
                }
            };
        }
        let value = (kind.draw)(self);
        let session = &self.inner.session;
        let params = session.finished_attempt(
            &step_name,
            json!({ "call": call }),
            None,
            Ok((kind.encode)(&value)),
            std::time::Duration::ZERO,
        );
        if let Err(halt) = session.hold(params) {
            return self.halt(halt).await;
        }
        Ok(value)
    }
}

/// A version 7 UUID whose time part is `at`.
fn uuid_v7_at(at: DateTime<Utc>) -> Uuid {
    let seconds = u64::try_from(at.timestamp()).unwrap_or(0);
    let timestamp =
        uuid::Timestamp::from_unix(uuid::NoContext, seconds, at.timestamp_subsec_nanos());
    Uuid::new_v7(timestamp)
}

fn hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    let mut seed = [0u8; 32];
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    for (byte, pair) in seed.iter_mut().zip(text.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_reads_back_as_itself() {
        let now = Utc::now().trunc_subsecs(6);
        assert_eq!((NOW.decode)(&(NOW.encode)(&now)), Some(now));
        for value in [0, 1, u64::MAX, 1 << 53 | 1] {
            let stored = (RANDOM_U64.encode)(&value);
            assert_eq!((RANDOM_U64.decode)(&stored), Some(value), "{stored}");
        }
        let seed: [u8; 32] = std::array::from_fn(|at| u8::try_from(at * 7).unwrap());
        assert_eq!((RNG_SEED.decode)(&(RNG_SEED.encode)(&seed)), Some(seed));
        let id = Uuid::now_v7();
        assert_eq!((UUID.decode)(&(UUID.encode)(&id)), Some(id));
    }

    #[test]
    fn values_that_were_not_recorded_by_this_code_are_refused() {
        assert_eq!((NOW.decode)(&json!(12)), None);
        assert_eq!(
            (RANDOM_U64.decode)(&json!(12)),
            None,
            "a number, not a string"
        );
        assert_eq!((RANDOM_U64.decode)(&json!("-1")), None);
        assert_eq!((RNG_SEED.decode)(&json!("ab")), None);
        assert_eq!((RNG_SEED.decode)(&json!("zz".repeat(32))), None);
        assert_eq!((RNG_SEED.decode)(&json!("é".repeat(32))), None);
        assert_eq!((UUID.decode)(&json!("not a uuid")), None);
    }

    #[test]
    fn a_seed_gives_the_same_sequence_every_time() {
        use rand::RngCore as _;
        const PINNED: u64 = 4_115_934_089_738_703_076;
        let seed = [7u8; 32];
        let draw = || {
            let mut rng = ChaCha8Rng::from_seed(seed);
            [rng.next_u64(), rng.next_u64(), rng.next_u64()]
        };
        assert_eq!(draw(), draw());
        // ChaCha8's stream for a seed is fixed across versions of `rand_chacha`: an upgrade
        // that changed it would make replays draw other numbers than their first execution.
        assert_eq!(draw()[0], PINNED);
    }

    #[test]
    fn a_uuid_carries_the_milliseconds_of_its_instant() {
        let at = DateTime::parse_from_rfc3339("2030-01-02T03:04:05.678901Z")
            .unwrap()
            .with_timezone(&Utc);
        let id = uuid_v7_at(at);
        assert_eq!(id.get_version_num(), 7);
        let (seconds, nanos) = id.get_timestamp().unwrap().to_unix();
        assert_eq!(
            (seconds, nanos),
            (u64::try_from(at.timestamp()).unwrap(), 678_000_000)
        );
    }
}
