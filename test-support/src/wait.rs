//! Waiting in tests for what happens in the background: a worker finishing a run, a
//! purge, a schedule firing.
//!
//! Both helpers poll: they ask, sleep [`POLL_EVERY`] (or the interval given), and ask again
//! until the answer comes or the time is up. Give them generous time-outs; they return as
//! soon as the answer is there, so a generous bound costs nothing when the test passes.

use std::time::Duration;

use tokio::time::Instant;

/// The interval of [`eventually`].
pub const POLL_EVERY: Duration = Duration::from_millis(50);

/// Why [`poll`] gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollError<E> {
    /// The probe answered "not yet" until the time-out passed.
    TimedOut {
        /// How long it waited.
        waited: Duration,
    },
    /// The probe failed; its error, at once (a failing probe is not retried).
    Failed(E),
}

impl<E: std::fmt::Display> std::fmt::Display for PollError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PollError::TimedOut { waited } => write!(f, "still not done after {waited:?}"),
            PollError::Failed(error) => write!(f, "{error}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for PollError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PollError::TimedOut { .. } => None,
            PollError::Failed(error) => Some(error),
        }
    }
}

/// Calls `probe` every `every` until it answers `Some`, and returns that answer.
///
/// The probe is asked at least once, and once more at the time-out, so a condition that
/// became true while the last interval passed is not missed.
///
/// Errors: [`PollError::TimedOut`] when the probe still answers `None` after `timeout`;
/// [`PollError::Failed`] with the probe's first error.
pub async fn poll<T, E>(
    timeout: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Result<Option<T>, E>,
) -> Result<T, PollError<E>> {
    let started = Instant::now();
    loop {
        if let Some(answer) = probe().await.map_err(PollError::Failed)? {
            return Ok(answer);
        }
        let waited = started.elapsed();
        if waited >= timeout {
            return Err(PollError::TimedOut { waited });
        }
        tokio::time::sleep(every.min(timeout - waited)).await;
    }
}

/// Whether `condition` holds within `timeout`, asked every [`POLL_EVERY`].
pub async fn eventually(timeout: Duration, mut condition: impl AsyncFnMut() -> bool) -> bool {
    let probe = async || Ok::<_, std::convert::Infallible>(condition().await.then_some(()));
    poll(timeout, POLL_EVERY, probe).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn poll_returns_the_first_answer() {
        let mut asked = 0;
        let answer = poll(
            Duration::from_secs(10),
            Duration::from_secs(1),
            async || {
                asked += 1;
                Ok::<_, String>((asked == 3).then_some(asked))
            },
        )
        .await;
        assert_eq!(answer, Ok(3));
    }

    #[tokio::test(start_paused = true)]
    async fn poll_times_out_after_asking_at_the_deadline() {
        let mut asked = 0;
        let answer = poll(Duration::from_secs(3), Duration::from_secs(1), async || {
            asked += 1;
            Ok::<Option<()>, String>(None)
        })
        .await;
        assert_eq!(
            answer,
            Err(PollError::TimedOut {
                waited: Duration::from_secs(3)
            })
        );
        // At 0, 1, 2 and 3 seconds.
        assert_eq!(asked, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn poll_stops_at_the_first_error() {
        let mut asked = 0;
        let answer: Result<(), _> =
            poll(Duration::from_secs(3), Duration::from_secs(1), async || {
                asked += 1;
                Err(format!("failure {asked}"))
            })
            .await;
        assert_eq!(answer, Err(PollError::Failed("failure 1".to_owned())));
    }

    #[tokio::test(start_paused = true)]
    async fn eventually_says_whether_the_condition_came_true() {
        let mut asked = 0;
        assert!(
            eventually(Duration::from_secs(1), async || {
                asked += 1;
                asked == 5
            })
            .await
        );
        assert!(!eventually(Duration::from_millis(200), async || false).await);
    }
}
