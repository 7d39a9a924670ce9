//! Cron expressions in a timezone (`croner` and `chrono-tz`), and the catch-up policy as a
//! plan of slots to fire.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use super::{CatchUp, ON_TIME, Schedule};

/// A cron expression or timezone that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error("invalid cron expression {cron:?}: {reason}")]
    InvalidCron {
        /// The expression.
        cron: String,
        /// Why, as the parser says.
        reason: String,
    },
    /// The timezone is not in the IANA timezone database.
    #[error(
        "unknown timezone {timezone:?} (expected an IANA name such as \"UTC\" or \"Europe/Paris\")"
    )]
    InvalidTimezone {
        /// The name.
        timezone: String,
    },
}

/// A parsed cron expression in a timezone: when a schedule's slots are.
///
/// Expressions have 5 fields (`minute hour day-of-month month day-of-week`) or 6 with
/// seconds first (`0 */5 * * * *`: every five minutes), with the extensions `croner`
/// accepts (`L`, `W`, `#`, `@daily`, ...). They are read in the timezone: `0 0 9 * * MON-FRI`
/// in `Europe/Paris` is 9 o'clock in Paris, summer and winter. Across a DST change, a
/// local time that does not exist is skipped and one that occurs twice fires once.
#[derive(Debug, Clone)]
pub struct Cadence {
    cron: Cron,
    timezone: Tz,
}

impl Cadence {
    /// Parses `cron` and `timezone`.
    pub fn parse(cron: &str, timezone: &str) -> Result<Cadence, ScheduleError> {
        let parsed = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(cron)
            .map_err(|error| ScheduleError::InvalidCron {
                cron: cron.to_owned(),
                reason: error.to_string(),
            })?;
        let timezone: Tz = timezone
            .parse()
            .map_err(|_| ScheduleError::InvalidTimezone {
                timezone: timezone.to_owned(),
            })?;
        Ok(Cadence {
            cron: parsed,
            timezone,
        })
    }

    /// The first slot strictly after `after`; `None` when there is none.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&self.timezone);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|at| at.with_timezone(&Utc))
    }

    /// The latest slot at or before `at`; `None` when there is none.
    pub fn latest_at(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = at.with_timezone(&self.timezone);
        self.cron
            .find_previous_occurrence(&local, true)
            .ok()
            .map(|at| at.with_timezone(&Utc))
    }
}

/// What a scheduler tick does with a due schedule: the slots it starts runs for (oldest
/// first) and the `next_slot` it sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirePlan {
    /// The slots to start runs for, oldest first; may be empty (every due slot was
    /// skipped).
    pub slots: Vec<DateTime<Utc>>,
    /// The first slot after `now`.
    pub next_slot: Option<DateTime<Utc>>,
}

/// The catch-up policy of `schedule` applied at `now` (the store's clock): the due slots are
/// those from its `next_slot` up to `now`.
pub fn plan(schedule: &Schedule, cadence: &Cadence, now: DateTime<Utc>) -> FirePlan {
    let next_slot = cadence.next_after(now);
    let Some(first) = schedule.next_slot.filter(|first| *first <= now) else {
        return FirePlan {
            slots: Vec::new(),
            next_slot: schedule.next_slot.or(next_slot),
        };
    };
    // Walk back from now, never before the first due slot: an outage of a year on an
    // every-second schedule costs at most `max` steps.
    let wanted = match schedule.catch_up {
        CatchUp::Skip | CatchUp::Latest => 1,
        CatchUp::All { max } => max as usize,
    };
    let mut slots = Vec::new();
    let mut cursor = now;
    while slots.len() < wanted {
        match cadence.latest_at(cursor) {
            Some(slot) if slot >= first => {
                slots.push(slot);
                match slot.checked_sub_signed(chrono::TimeDelta::microseconds(1)) {
                    Some(before) => cursor = before,
                    None => break,
                }
            }
            _ => break,
        }
    }
    // The stored `next_slot` is a slot of the expression (unless the expression changed
    // under it, which `put_schedule` prevents): keep it when the walk did not reach it.
    if slots.is_empty() {
        slots.push(first);
    }
    if schedule.catch_up == CatchUp::Skip {
        let on_time = chrono::TimeDelta::from_std(ON_TIME).unwrap_or(chrono::TimeDelta::MAX);
        slots.retain(|slot| now.signed_duration_since(*slot) < on_time);
    }
    slots.reverse();
    FirePlan { slots, next_slot }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone as _;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn schedule(cron: &str, next_slot: &str, catch_up: CatchUp) -> Schedule {
        Schedule {
            namespace: "default".into(),
            name: "s".into(),
            workflow_name: "w".into(),
            version: None,
            cron: cron.into(),
            timezone: "UTC".into(),
            input: serde_json::Value::Null,
            catch_up,
            paused: false,
            next_slot: Some(at(next_slot)),
            created_at: Utc.timestamp_opt(0, 0).unwrap(),
            updated_at: Utc.timestamp_opt(0, 0).unwrap(),
        }
    }

    #[test]
    fn expressions_and_timezones_parse_or_say_why() {
        assert!(Cadence::parse("0 */5 * * * *", "Europe/Paris").is_ok());
        assert!(Cadence::parse("*/5 * * * *", "UTC").is_ok());
        assert!(matches!(
            Cadence::parse("61 * * * *", "UTC"),
            Err(ScheduleError::InvalidCron { .. })
        ));
        assert!(matches!(
            Cadence::parse("* * * * *", "Mars/Olympus"),
            Err(ScheduleError::InvalidTimezone { .. })
        ));
    }

    #[test]
    fn slots_are_read_in_the_timezone() {
        let nine_in_paris = Cadence::parse("0 0 9 * * *", "Europe/Paris").unwrap();
        // Winter: UTC+1; summer: UTC+2.
        assert_eq!(
            nine_in_paris.next_after(at("2026-01-10T12:00:00Z")),
            Some(at("2026-01-11T08:00:00Z"))
        );
        assert_eq!(
            nine_in_paris.next_after(at("2026-07-10T12:00:00Z")),
            Some(at("2026-07-11T07:00:00Z"))
        );
        let every_second = Cadence::parse("* * * * * *", "UTC").unwrap();
        assert_eq!(
            every_second.next_after(at("2026-01-01T00:00:00.5Z")),
            Some(at("2026-01-01T00:00:01Z"))
        );
        assert_eq!(
            every_second.latest_at(at("2026-01-01T00:00:00.5Z")),
            Some(at("2026-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn catch_up_policies_pick_their_slots() {
        let hourly = Cadence::parse("0 0 * * * *", "UTC").unwrap();
        let now = at("2026-05-01T12:10:00Z");
        let missed = |policy| {
            plan(
                &schedule("0 0 * * * *", "2026-05-01T09:00:00Z", policy),
                &hourly,
                now,
            )
        };
        assert!(missed(CatchUp::Skip).slots.is_empty());
        assert_eq!(
            missed(CatchUp::Latest).slots,
            vec![at("2026-05-01T12:00:00Z")]
        );
        assert_eq!(
            missed(CatchUp::All { max: 2 }).slots,
            vec![at("2026-05-01T11:00:00Z"), at("2026-05-01T12:00:00Z")]
        );
        assert_eq!(
            missed(CatchUp::All { max: 100 }).slots.len(),
            4,
            "09:00, 10:00, 11:00 and 12:00"
        );
        for policy in [CatchUp::Skip, CatchUp::Latest, CatchUp::All { max: 3 }] {
            assert_eq!(missed(policy).next_slot, Some(at("2026-05-01T13:00:00Z")));
        }
        // On time: every policy fires the current slot.
        let on_time = at("2026-05-01T12:00:05Z");
        let current = schedule("0 0 * * * *", "2026-05-01T12:00:00Z", CatchUp::Skip);
        assert_eq!(
            plan(&current, &hourly, on_time).slots,
            vec![at("2026-05-01T12:00:00Z")]
        );
        // Not due yet: nothing fires and the slot stays.
        let early = plan(&current, &hourly, at("2026-05-01T11:59:00Z"));
        assert!(early.slots.is_empty());
        assert_eq!(early.next_slot, Some(at("2026-05-01T12:00:00Z")));
    }
}
