//! The store conformance suite of `tasks`: the behaviour every [`Store`] must have,
//! specified by example. A new backend proves itself with one macro call in a test file:
//!
//! ```ignore
//! // tests/conformance.rs of a crate with a store `MyStore`
//! async fn my_store() -> MyStore {
//!     // A store on a fresh, empty namespace of a test database.
//!     MyStore::connect("...").await.unwrap().with_namespace(uuid::Uuid::new_v4().to_string()).unwrap()
//! }
//!
//! tasks_conformance::conformance_suite!(my_store);
//! ```
//!
//! That expands to one `#[tokio::test]` per case (about two hundred). The dev-dependencies it
//! needs are this crate and `tasks-core` (the suite depends on nothing else of `tasks`); the
//! suite brings its own Tokio.
//!
//! Each case is an `async fn` generic over a [`Setup`], a factory that yields a fresh store on
//! a fresh namespace every time it is called. Cases never share a namespace, never depend on
//! one another or on their order, and create every run they look at. A store implementation
//! runs the whole suite with [`conformance_suite!`](crate::conformance_suite).
//!
//! Stores that come out of the setup must be able to reach each other's rows through
//! [`Store::scoped`] (same database), which the isolation cases rely on.
//!
//! Timing bounds are generous: the suite must pass on a loaded two-core machine.

#![warn(missing_docs)]

use std::future::Future;

use tasks_core::Store;

/// Asserts that a store call failed with an error matching a pattern (matched against
/// `&StoreError`).
macro_rules! assert_err {
    ($result:expr, $pattern:pat $(if $guard:expr)? $(,)?) => {
        match $result {
            Ok(value) => panic!(
                "expected an error matching `{}`, got Ok({:?})",
                stringify!($pattern),
                value
            ),
            Err(error) => assert!(
                matches!(&error, $pattern $(if $guard)?),
                "expected an error matching `{}`, got {:?}",
                stringify!($pattern),
                error
            ),
        }
    };
}

pub mod admission;
pub mod children;
pub mod claims;
pub mod continuation;
pub mod events;
pub mod fence;
pub mod flow;
pub mod idempotency;
pub mod isolation;
pub mod lifecycle;
pub mod limits;
pub mod listing;
pub mod liveness;
pub mod outcomes;
pub mod overview;
pub mod primitive_rules;
pub mod queues;
pub mod record;
pub mod retention;
pub mod retry;
pub mod rules;
pub mod runs;
pub mod schedules;
pub mod select;
pub mod signal;
pub mod state;
pub mod status;
pub mod step_outcomes;
pub mod steps;
mod support;
pub mod traces;

#[doc(hidden)]
pub mod __private {
    pub use tokio;
}

/// A factory of fresh stores: every call yields a store on a new, empty namespace.
///
/// Implemented by every `Fn() -> impl Future<Output = impl Store>`, such as an
/// `async fn() -> PgStore`. The future need not be `Send`: cases run it on the test's
/// own runtime.
pub trait Setup {
    /// The store under test.
    type Store: Store;

    /// A store on a fresh namespace.
    fn store(&self) -> impl Future<Output = Self::Store>;
}

impl<F, Fut> Setup for F
where
    F: Fn() -> Fut,
    Fut: Future,
    Fut::Output: Store,
{
    type Store = Fut::Output;

    fn store(&self) -> impl Future<Output = Self::Store> {
        self()
    }
}

/// Expands to one `#[tokio::test]` per conformance case, each running the case with
/// `$setup`, a path to an `async fn() -> impl Store` (or any [`Setup`]) that returns a store
/// on a fresh namespace.
///
/// Tests are grouped in modules named after the case files (`runs`, `listing`, `admission`, `rules`, `primitive_rules`, `claims`,
/// `outcomes`, `lifecycle`, `steps`, `step_outcomes`, `fence`, `record`, `retry`, `retention`, `limits`, `liveness`, `overview`, `events`, `signal`, `state`, `status`, `children`, `continuation`, `flow`, `queues`, `idempotency`, `schedules`, `isolation`); cases that exercise
/// concurrency run on a multi-threaded runtime.
///
/// ```ignore
/// tasks_conformance::conformance_suite!(my_crate::tests::fresh_store);
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($setup:path) => {
        $crate::__conformance_module! { $setup, runs {
            create_run_with_all_fields,
            create_run_with_minimal_fields,
            create_run_keeps_deadline,
            create_run_with_delay_starts_later,
            create_run_stores_retry_policy_in_config,
            get_run_of_unknown_id_is_none,
            idempotency_key_returns_existing_run,
            idempotency_key_is_scoped_to_workflow_name,
            create_or_get_run_says_whether_it_created,
        } multi_thread {
            idempotency_race_creates_one_run,
        } }
        $crate::__conformance_module! { $setup, idempotency {
            idempotency_for_ever_keeps_the_key_after_the_run_finished,
            idempotency_while_active_frees_the_key_once_the_run_finished,
            idempotency_ttl_frees_the_key_after_its_time,
            idempotency_ttl_is_checked,
        } multi_thread {
            idempotency_release_race_creates_one_run,
        } }
        $crate::__conformance_module! { $setup, listing {
            list_runs_ordered_by_creation_time,
            list_runs_paginates_forward_and_back,
            list_runs_paginates_runs_created_back_to_back,
            list_runs_cursor_breaks_timestamp_ties_by_id,
            list_runs_empty,
            list_runs_exact_limit,
            list_runs_descending_with_cursors,
            list_runs_filters_by_status,
            list_runs_filters_by_workflow_name,
            list_runs_filters_by_creation_time,
            count_runs_by_status,
            cursors_round_trip_through_strings,
            invalid_cursor_is_rejected,
            invalid_page_arguments_are_rejected,
            list_runs_filters_by_version_queue_and_key,
            list_runs_searches_by_id_or_idempotency_key,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, overview {
            queue_backlogs_count_live_runs_per_queue,
            list_workers_shows_heartbeats_and_running_runs,
            finished_runs_counts_the_window_by_status,
            overview_reads_are_bounded,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, admission {
            claim_admits_keys_as_the_core_walk_does,
            claim_admits_priorities_as_the_core_walk_does,
            claim_admits_queue_slots_as_the_core_walk_does,
            claim_admits_rate_windows_as_the_core_walk_does,
            claim_admits_mixed_limits_as_the_core_walk_does,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, rules {
            transitions_land_where_the_core_says,
            fail_gives_up_as_the_core_rule_decides,
            attempts_count_as_the_core_rule_says,
            fork_copies_what_the_core_boundary_says,
            purge_unlinks_as_the_core_rule_says,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, primitive_rules {
            event_waits_follow_the_core_rule,
            state_versions_follow_the_core_rule,
            schedule_put_keeps_the_slot_as_the_core_rule_says,
            parent_countdown_follows_the_core_rule,
            idempotency_keys_lapse_as_the_core_rule_says,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, claims {
            claim_respects_lease_and_reclaims_after_expiry,
            claim_prefers_expired_leases_over_pending,
            claim_returns_none_when_nothing_is_available,
            claim_skips_runs_not_yet_available,
            claim_runs_takes_up_to_limit,
            claim_runs_fills_a_batch_with_expired_leases_first,
            extend_lease_pushes_expiry,
            extend_lease_of_paused_or_canceled_run_is_wrong_state,
            extend_lease_after_takeover_is_lease_lost,
            sleep_parks_run_until_time,
            sleeping_run_is_claimable_after_wake_time,
            sleep_is_refused_unless_running,
        } multi_thread {
            concurrent_batch_claimers_never_share_a_run,
        } }
        $crate::__conformance_module! { $setup, outcomes {
            complete_run_marks_completed,
            complete_run_is_fenced_on_owner_and_status,
            fail_run_reschedules_with_backoff,
            fail_run_backoff_grows_between_attempts,
            fail_run_fails_for_good_when_attempts_are_exhausted,
            fail_run_fails_for_good_when_forced,
            fail_run_backoff_follows_the_policy_interval,
            release_run_returns_run_to_pending,
            deadline_passed_run_is_not_claimed,
            claim_fails_pending_runs_past_deadline,
            claim_fails_running_runs_past_deadline,
            fail_run_fails_for_good_when_retry_would_pass_deadline,
            fail_run_reschedules_when_retry_fits_before_deadline,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, lifecycle {
            cancel_pending_run,
            cancel_running_run,
            cancel_sleeping_run,
            cancel_paused_run,
            cancel_completed_run_is_wrong_state,
            cancel_failed_run_is_wrong_state,
            cancel_is_idempotent,
            cancel_unknown_run_is_not_found,
            canceled_run_is_not_claimed,
            pause_pending_run,
            pause_running_run,
            pause_sleeping_run,
            pause_is_idempotent,
            pause_refuses_terminal_runs,
            paused_run_is_not_claimed,
            resume_makes_paused_run_pending_now,
            resume_is_idempotent_on_pending_and_running,
            resume_refuses_terminal_runs,
            unknown_run_is_not_found_for_every_operation,
            finished_run_is_wrong_state_for_every_worker_operation,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, retry {
            retry_failed_run_keeps_its_history,
            retry_canceled_run,
            retry_refuses_live_and_completed_runs,
            retry_unknown_run_is_not_found,
            fork_copies_the_history_before_the_step,
            fork_refuses_live_runs_and_unknown_steps,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, retention {
            purge_selects_by_age,
            purge_selects_by_status,
            purge_works_in_batches,
            purge_removes_steps_events_and_links,
            purge_never_touches_live_runs,
            purge_refuses_bad_filters,
            purge_is_scoped_to_namespace,
            purge_keeps_children_of_live_parents,
        } multi_thread {
            purge_racing_retries_keeps_retried_runs,
            retention_turn_goes_to_one_worker_per_period,
        } }
        $crate::__conformance_module! { $setup, steps {
            create_step_attempt_returns_running_attempt,
            get_step_attempt_returns_persisted_attempt,
            list_step_attempts_ordered_by_creation_time,
            list_step_attempts_paginates_forward_and_back,
            list_step_attempts_empty,
            list_step_attempts_exact_limit,
            list_step_attempts_descending_with_cursors,
            list_step_attempts_only_lists_the_run,
            step_history_lists_attempts_oldest_first,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, step_outcomes {
            complete_step_attempt_records_output,
            complete_step_attempt_when_run_not_running_is_wrong_state,
            complete_unknown_step_attempt_is_not_found,
            step_attempt_of_another_run_is_not_found,
            finished_step_attempt_cannot_be_finished_again,
            step_finished_after_pause_is_interrupted,
            step_finished_after_cancel_is_interrupted,
            create_step_attempt_is_fenced,
            stale_worker_cannot_write_after_takeover,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, fence {
            every_claim_takes_a_new_epoch,
            a_stale_claim_of_the_same_worker_cannot_write,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, record {
            record_step_attempt_stores_a_completed_attempt,
            recorded_kinds_and_call_identities_round_trip,
            record_step_attempt_stores_a_failed_attempt,
            record_step_attempt_rejects_unfinished_statuses,
            record_step_attempt_is_fenced,
            record_step_attempt_after_pause_or_cancel_is_interrupted,
            complete_run_with_steps_writes_steps_and_completes,
            complete_run_with_steps_is_fenced,
            complete_run_with_steps_rejects_bad_attempts,
            recorded_arguments_round_trip,
            recorded_arguments_past_the_limits_are_refused,
            first_claim_is_recognisable,
            a_repeated_record_is_stored_once,
            a_record_with_another_runs_attempt_id_is_refused,
            a_retried_completion_stores_its_steps_once,
            a_repeated_create_is_stored_once,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, limits {
            create_run_refuses_values_past_the_limits,
            create_run_accepts_values_at_the_limits,
            list_runs_refuses_hostile_filters_and_cursors,
            hostile_namespaces_are_refused,
            worker_writes_past_the_limits_are_refused,
            cursors_outside_the_time_range_are_invalid,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, liveness {
            stale_heartbeat_makes_runs_claimable,
            fresh_heartbeat_keeps_runs,
            heartbeat_again_refreshes_the_row,
            worker_without_heartbeat_keeps_its_lease,
            removed_worker_falls_back_to_its_lease,
            stale_worker_does_not_reclaim_its_own_runs,
            heartbeats_are_scoped_to_namespace,
            stale_workers_runs_come_before_pending_runs,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, events {
            event_sent_before_the_wait_is_delivered,
            wait_parks_and_a_send_wakes_the_run,
            events_are_delivered_in_order_once_per_topic,
            a_completed_wait_is_not_repeated,
            duplicate_sends_store_one_event,
            wait_times_out,
            send_is_refused_for_unknown_and_finished_runs,
            send_by_workflow_and_idempotency_key,
            wait_is_fenced,
            paused_waiting_run_keeps_its_event,
            send_does_not_wake_a_durable_sleep,
            waking_send_is_announced,
            event_values_past_the_limits_are_refused,
        } multi_thread {
            send_racing_a_park_never_loses_the_wake_up,
        } }
        $crate::__conformance_module! { $setup, signal {
            signal_with_start_creates_the_run_then_signals_it,
            signal_with_start_wakes_a_run_parked_on_the_topic,
            signal_with_start_deduplicates_its_event,
            signal_with_start_to_a_finished_run,
            signal_with_start_is_checked,
        } multi_thread {
            concurrent_signal_with_start_makes_one_run_with_every_event,
        } }
        $crate::__conformance_module! { $setup, state {
            publications_version_the_latest_value,
            a_recorded_publication_is_not_repeated,
            publication_is_fenced,
            reading_an_unknown_run_is_not_found,
            publication_is_announced,
            purge_removes_published_state,
            state_values_past_the_limits_are_refused,
        } multi_thread {
            concurrent_publications_get_distinct_versions,
        } }
        $crate::__conformance_module! { $setup, continuation {
            continue_run_hands_over_to_a_successor,
            continue_run_is_fenced,
            continue_run_refuses_children_and_bad_input,
            unconsumed_events_move_to_the_successor,
            sends_to_a_continued_run_reach_the_lineage_head,
            sends_to_a_purged_first_run_reach_the_lineage_head,
            lineage_head_of_a_plain_run,
        } multi_thread {
            sends_racing_a_hand_over_are_not_lost,
        } }
        $crate::__conformance_module! { $setup, children {
            child_start_is_memoized,
            child_start_is_fenced,
            child_completion_wakes_the_parent,
            parent_wakes_after_its_last_child,
            wait_for_finished_children_does_not_park,
            child_cancel_wakes_the_parent,
            child_deadline_wakes_the_parent,
            cancel_cascades_to_children,
            runs_are_listed_by_parent,
        } multi_thread {
            a_cancel_racing_finishing_children_never_fails,
        } }
        $crate::__conformance_module! { $setup, select {
            select_answers_the_topics_with_events,
            select_on_several_topics_is_woken_by_any,
            select_on_one_topic_and_its_wait_is_cleared,
            select_parks_until_its_deadline,
            select_is_woken_by_a_child_that_ends,
            select_is_fenced_and_checked,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, traces {
            trace_context_is_stored_and_claimed_with_the_run,
            children_and_forks_keep_their_trace_context,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, queues {
            run_queue_is_stored_and_checked,
            queue_operations_round_trip,
            claim_filters_by_queue_and_workflow,
            claim_respects_the_queue_limit,
            a_limit_set_elsewhere_holds_at_the_next_claim,
            queue_slots_follow_the_running_status,
            rate_limit_spreads_starts_over_windows,
            per_key_rate_limit_spreads_each_keys_starts,
            per_key_concurrency_caps_each_keys_running_runs,
        } multi_thread {
            concurrent_claimers_respect_queue_limits,
            concurrent_claimers_respect_the_per_key_limit,
        } }
        $crate::__conformance_module! { $setup, flow {
            claim_takes_higher_priority_first,
            claim_respects_the_key_limit,
            hot_key_does_not_starve_other_keys,
            sleeping_run_holds_no_slot,
            slots_follow_the_running_status,
            keys_are_scoped_to_namespace,
            concurrency_values_are_checked,
        } multi_thread {
            concurrent_claimers_respect_the_key_limit,
        } }
        $crate::__conformance_module! { $setup, status {
            sleeps_and_event_waits_announce_sleeping,
            pause_and_resume_announce_their_status,
            claims_announce_running,
            retries_and_releases_announce_pending,
            finishes_are_not_status_changes,
            deadline_failures_are_announced,
        } multi_thread {} }
        $crate::__conformance_module! { $setup, schedules {
            create_get_and_list_schedules,
            put_keeps_the_slot_of_an_unchanged_schedule,
            pause_resume_and_delete,
            due_schedules_are_the_unpaused_past_slots,
            fire_moves_the_slot_and_creates_the_runs,
            fire_without_runs_and_repeated_keys,
            schedules_are_scoped_to_namespace,
            schedule_values_past_the_limits_are_refused,
        } multi_thread {
            concurrent_fires_of_a_slot_create_one_run,
        } }
        $crate::__conformance_module! { $setup, isolation {
            namespaces_are_isolated,
            idempotency_keys_are_scoped_to_namespace,
            subscribers_get_their_namespace_notifications,
        } multi_thread {} }
    };
}

/// Implementation detail of [`conformance_suite!`](crate::conformance_suite).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_module {
    (
        $setup:path, $module:ident { $($case:ident),* $(,)? }
        multi_thread { $($concurrent:ident),* $(,)? }
    ) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            $(
                #[$crate::__private::tokio::test(crate = "::tasks_conformance::__private::tokio")]
                async fn $case() {
                    $crate::$module::$case($setup).await;
                }
            )*

            $(
                #[$crate::__private::tokio::test(
                    crate = "::tasks_conformance::__private::tokio",
                    flavor = "multi_thread",
                    worker_threads = 4
                )]
                async fn $concurrent() {
                    $crate::$module::$concurrent($setup).await;
                }
            )*
        }
    };
}

#[cfg(test)]
mod tests {
    /// Every case of every file is listed under its module in `conformance_suite!`, so no
    /// case is silently left out of a store's run.
    #[test]
    fn every_case_is_in_the_suite() {
        let suite = include_str!("lib.rs");
        let files = [
            ("runs", include_str!("runs.rs")),
            ("idempotency", include_str!("idempotency.rs")),
            ("listing", include_str!("listing.rs")),
            ("admission", include_str!("admission.rs")),
            ("rules", include_str!("rules.rs")),
            ("primitive_rules", include_str!("primitive_rules.rs")),
            ("claims", include_str!("claims.rs")),
            ("outcomes", include_str!("outcomes.rs")),
            ("lifecycle", include_str!("lifecycle.rs")),
            ("steps", include_str!("steps.rs")),
            ("step_outcomes", include_str!("step_outcomes.rs")),
            ("fence", include_str!("fence.rs")),
            ("record", include_str!("record.rs")),
            ("retry", include_str!("retry.rs")),
            ("retention", include_str!("retention.rs")),
            ("limits", include_str!("limits.rs")),
            ("liveness", include_str!("liveness.rs")),
            ("overview", include_str!("overview.rs")),
            ("events", include_str!("events.rs")),
            ("signal", include_str!("signal.rs")),
            ("state", include_str!("state.rs")),
            ("children", include_str!("children.rs")),
            ("select", include_str!("select.rs")),
            ("continuation", include_str!("continuation.rs")),
            ("flow", include_str!("flow.rs")),
            ("queues", include_str!("queues.rs")),
            ("status", include_str!("status.rs")),
            ("schedules", include_str!("schedules.rs")),
            ("isolation", include_str!("isolation.rs")),
            ("traces", include_str!("traces.rs")),
        ];
        let mut total = 0;
        for (module, source) in files {
            let opening = format!("$setup, {module} {{\n");
            let start = suite
                .find(&opening)
                .unwrap_or_else(|| panic!("module {module} is missing from the suite"));
            let block = &suite[start..start + suite[start..].find("} }").unwrap()];
            for line in source.lines() {
                if let Some(rest) = line.strip_prefix("pub async fn ") {
                    let name = rest.split(['(', '<']).next().unwrap();
                    assert!(
                        block.contains(&format!("            {name},\n")),
                        "case {module}::{name} is not listed in conformance_suite!"
                    );
                    total += 1;
                }
            }
        }
        let macro_start = suite.find("macro_rules! conformance_suite").unwrap();
        let macro_end = suite.find("macro_rules! __conformance_module").unwrap();
        let listed = suite[macro_start..macro_end]
            .lines()
            .filter_map(|line| line.strip_prefix("            ")?.strip_suffix(','))
            .filter(|name| {
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
            .count();
        assert_eq!(listed, total, "the suite lists cases that do not exist");
    }
}
