//! A worker's scheduler: puts the declared schedules at start, then every tick fires the
//! due slots of every schedule in its namespace (see [`crate::schedule`] for why each slot
//! fires once however many workers tick).

use std::collections::HashMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use crate::definition::WorkflowDefinition;
use crate::error::StoreResult;
use crate::registry::Registry;
use crate::schedule::{
    Cadence, FireSchedule, NewSchedule, Schedule, ScheduleDeclaration, plan, slot_runs,
};
use crate::store::SharedStore;

/// Default time between two ticks of a worker's scheduler.
pub(crate) const DEFAULT_TICK: Duration = Duration::from_millis(500);

/// How many due schedules one tick reads.
const DUE_PER_TICK: u32 = 100;

/// The scheduler of one worker.
#[derive(Clone)]
pub(crate) struct Scheduler {
    pub(crate) store: SharedStore,
    /// The declared schedules of the workflows the worker knows.
    pub(crate) declared: Vec<&'static ScheduleDeclaration>,
    /// The workflows the worker knows, by name and version: the runs it starts take their
    /// retry policy, queue and derived concurrency key from them.
    pub(crate) definitions: HashMap<(String, Option<String>), &'static WorkflowDefinition>,
    pub(crate) tick: Duration,
}

/// The running scheduler task, aborted when dropped.
pub(crate) struct Ticking {
    stop: CancellationToken,
    task: AbortOnDropHandle<()>,
}

impl Ticking {
    /// Stops the ticks and waits for the one in progress.
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        if let Err(error) = self.task.await {
            tracing::debug!(%error, "the scheduler task ended abnormally");
        }
    }
}

impl Scheduler {
    /// The scheduler of a worker with `registry`: the declared schedules of its workflows.
    pub(crate) fn new(store: SharedStore, registry: &Registry, tick: Duration) -> Self {
        let declared = crate::schedule::declared()
            .filter(|declaration| {
                registry
                    .get(declaration.workflow, declaration.version)
                    .is_some()
            })
            .collect();
        let definitions = registry
            .iter()
            .map(|definition| {
                (
                    (
                        definition.name.to_owned(),
                        definition.version.map(str::to_owned),
                    ),
                    definition,
                )
            })
            .collect();
        Scheduler {
            store,
            declared,
            definitions,
            tick,
        }
    }

    /// Puts the declared schedules, then ticks until stopped.
    pub(crate) fn start(&self) -> Ticking {
        let stop = CancellationToken::new();
        let scheduler = self.clone();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut pending: Vec<_> = scheduler.declared.clone();
                let mut ticks = tokio::time::interval(scheduler.tick);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        _ = ticks.tick() => {}
                    }
                    // A put that failed (the database was down) is tried again next tick.
                    if !pending.is_empty() {
                        pending = scheduler.put_declared(pending).await;
                    }
                    if let Err(error) = scheduler.fire_due().await {
                        tracing::warn!(%error, "firing schedules failed; retrying at the next tick");
                    }
                }
            }
            .instrument(tracing::Span::current())
        });
        Ticking {
            stop,
            task: AbortOnDropHandle::new(task),
        }
    }

    /// Puts `declarations`; returns those whose put failed for a reason worth retrying.
    async fn put_declared(
        &self,
        declarations: Vec<&'static ScheduleDeclaration>,
    ) -> Vec<&'static ScheduleDeclaration> {
        let mut failed = Vec::new();
        for declaration in declarations {
            let schedule = declaration.to_new_schedule();
            match put(&self.store, schedule).await {
                Ok(()) => {}
                Err(PutError::Store(error)) if error.is_transient() => {
                    tracing::warn!(%error, schedule = declaration.workflow, "putting a declared schedule failed; retrying");
                    failed.push(declaration);
                }
                Err(error) => {
                    tracing::error!(%error, schedule = declaration.workflow, "a declared schedule cannot be stored");
                }
            }
        }
        failed
    }

    /// Fires the due slots of every due schedule once; returns how many runs it started.
    pub(crate) async fn fire_due(&self) -> StoreResult<usize> {
        let due = self
            .store
            .contract()
            .schedules()?
            .due_schedules(DUE_PER_TICK)
            .await?;
        let mut started = 0;
        for schedule in &due.schedules {
            started += self.fire(schedule, due.now).await?;
        }
        Ok(started)
    }

    async fn fire(
        &self,
        schedule: &Schedule,
        now: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<usize> {
        let Some(slot) = schedule.next_slot else {
            return Ok(0);
        };
        let cadence = match Cadence::parse(&schedule.cron, &schedule.timezone) {
            Ok(cadence) => cadence,
            Err(error) => {
                // Only a row written around the checks gets here; it stays due and is
                // reported every tick rather than silently dropped.
                tracing::error!(%error, schedule = %schedule.name, "a stored schedule does not parse");
                return Ok(0);
            }
        };
        let fire_plan = plan(schedule, &cadence, now);
        let definition = self
            .definitions
            .get(&(schedule.workflow_name.clone(), schedule.version.clone()))
            .copied();
        let derived = definition
            .map(|d| d.derived_concurrency(&schedule.input))
            .transpose()
            .map(Option::flatten);
        let checked = derived
            .map_err(|error| error.to_string())
            .and_then(|concurrency| {
                match &concurrency {
                    Some(key) => key.check().map_err(|error| error.to_string()),
                    None => Ok(()),
                }
                .map(|()| concurrency)
            });
        let concurrency = match checked {
            Ok(concurrency) => concurrency,
            Err(error) => {
                // The input passed these checks when the schedule was stored; only changed
                // code gets here. The schedule stays due and is reported every tick (the
                // other schedules still fire): its runs never start without the key that
                // limits them.
                tracing::error!(%error, schedule = %schedule.name, "the concurrency key of a schedule's runs cannot be derived");
                return Ok(0);
            }
        };
        let mut runs = slot_runs(
            schedule,
            &fire_plan.slots,
            definition.and_then(|d| d.retry_policy),
        );
        // The workflow's queue and derived key, as for a start without options.
        let queue = definition.and_then(|d| d.queue).map(str::to_owned);
        for run in &mut runs {
            run.concurrency.clone_from(&concurrency);
            run.queue.clone_from(&queue);
        }
        let params = FireSchedule {
            name: schedule.name.clone(),
            slot,
            next_slot: fire_plan.next_slot,
            runs,
        };
        match self
            .store
            .contract()
            .schedules()?
            .fire_schedule(params)
            .await?
        {
            Some(runs) => {
                tracing::debug!(schedule = %schedule.name, runs = runs.len(), skipped = fire_plan.slots.is_empty(), "schedule fired");
                Ok(runs.len())
            }
            None => Ok(0),
        }
    }
}

/// Why a schedule could not be put.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PutError {
    #[error(transparent)]
    Schedule(#[from] crate::schedule::ScheduleError),
    #[error(transparent)]
    Store(#[from] crate::error::StoreError),
}

/// Puts `schedule`, with its first slot from its own cadence.
async fn put(store: &SharedStore, schedule: NewSchedule) -> Result<(), PutError> {
    let cadence = Cadence::parse(&schedule.cron, &schedule.timezone)?;
    let first_slot = move |now| cadence.next_after(now);
    store
        .contract()
        .schedules()?
        .put_schedule(schedule, &first_slot)
        .await?;
    Ok(())
}
