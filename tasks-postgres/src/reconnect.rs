//! What a broken connection costs a caller: which driver errors mean the connection broke,
//! and the statements the store runs again on a fresh connection when they do.
//!
//! A server restart ends every session. The pool replaces its stale connections as soon as
//! one statement finds its own broken (see [`stale`](super::stale)); the statement that
//! found it, and any other already running on a stale connection, failed all the same. A
//! store method that is safe to run twice runs again ([`retrying`]), for at most
//! [`RETRY_BUDGET`]:
//!
//! - reads (runs, step attempts, step history, events, published state, schedules,
//!   queues);
//! - writes that a second execution cannot duplicate: a start with an idempotency key
//!   (the second finds the first's run), an event sent with a deduplication key (the
//!   second finds the first's event and answers it as a repeat), a step attempt created or
//!   recorded with its id (the second finds the stored attempt), a worker's heartbeat and
//!   a lease extension (both set the same values again), a queue's configuration (an
//!   upsert of the same values).
//!
//! Anything else fails with the [`StoreError::Database`] of the broken connection, as
//! before: a start without a key (the first may have committed before its answer was lost,
//! and a second would be another run), a claim (a second would lease other runs), the
//! transitions of a run (completing, failing, sleeping, canceling: a second would find the
//! run changed and answer with a refusal instead of the result), a fork, a purge, deleting
//! a schedule or a queue. The worker's own session retries its writes on such errors (it
//! knows how to read a refusal after a lost answer); a client's caller decides.
//!
//! Only a connection that broke is a reason to run a statement again: a query the server
//! refused (a constraint, a cancellation, a timeout) would be refused again.

use crate::CONNECT_TIMEOUT;
use sqlx::Connection as _;
use sqlx::PgConnection;
use sqlx::postgres::PgConnectOptions;
use std::future::Future;
use std::time::{Duration, Instant};
use tasks_core::error::{BoxError, Operation, StoreError, StoreResult};

/// How long a safe statement is tried again after its connection broke, counted from its
/// first try: a server restart takes a few seconds (the pool waits for the server to accept
/// connections again within each try).
pub(crate) const RETRY_BUDGET: Duration = Duration::from_secs(5);

/// The first pause before a statement is tried again; each next one doubles, up to
/// [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two tries.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// Whether `code` (a SQLSTATE) says the server ended the session or could not serve it:
/// an administrator's shutdown (`57P01`, what a restart sends every session), a crash of
/// another backend (`57P02`), a server starting up or shutting down (`57P03`), or a
/// connection exception (class `08`).
fn ends_the_session(code: &str) -> bool {
    matches!(code, "57P01" | "57P02" | "57P03") || code.starts_with("08")
}

/// Whether `error` says the connection broke before or during the statement, so that the
/// server may not have seen it (or its answer was lost): the socket failed (every I/O
/// error: reset, closed, refused, a runtime that shut down), or the server ended the
/// session ([`ends_the_session`]). Errors of the statement itself, of the pool (a timeout
/// waiting for a connection, a closed pool) and of decoding are not.
pub(crate) fn connection_broke(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(error) => error.code().is_some_and(|code| ends_the_session(&code)),
        _ => false,
    }
}

/// Whether `error`, from opening a connection, says the server is not accepting
/// connections for now: nothing listens at its address (stopped, or not started yet), it
/// closed the socket during the handshake, or it answered that it is starting up or
/// shutting down. A server that refuses for another reason (a password, a database that
/// does not exist, TLS) answers the same the next time.
pub(crate) fn server_unavailable(error: &sqlx::Error) -> bool {
    use std::io::ErrorKind;
    match error {
        sqlx::Error::Io(error) => matches!(
            error.kind(),
            ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::NotFound
                | ErrorKind::UnexpectedEof
        ),
        sqlx::Error::Database(error) => error
            .code()
            .is_some_and(|code| matches!(&*code, "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}

/// The store error of a statement of `operation` that failed with `source`, like
/// [`tasks_core::error::db`]; when `source` says the connection broke, the pool is told
/// first, so that it hands out none of the connections opened before (see
/// [`stale`](super::stale)).
pub(crate) fn db<E: Into<BoxError>>(operation: Operation) -> impl FnOnce(E) -> StoreError {
    move |source| {
        let source: BoxError = source.into();
        if source
            .downcast_ref::<sqlx::Error>()
            .is_some_and(connection_broke)
        {
            super::stale::note_broken_connection(&source);
        }
        StoreError::Database { operation, source }
    }
}

/// The error a batched write hands each of its callers when its statement failed (the
/// driver's error goes to one place only): its message, and whether the connection broke.
#[derive(Debug, Clone)]
pub(crate) struct BatchFailed {
    message: String,
    connection_broke: bool,
}

impl BatchFailed {
    /// The error of a batch whose statement failed with `error`.
    pub(crate) fn of(error: &StoreError) -> Self {
        BatchFailed {
            message: error.to_string(),
            connection_broke: broke(error),
        }
    }
}

impl std::fmt::Display for BatchFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BatchFailed {}

/// Whether a store error is a statement's connection breaking ([`connection_broke`]).
pub(crate) fn broke(error: &StoreError) -> bool {
    let StoreError::Database { source, .. } = error else {
        return false;
    };
    if let Some(error) = source.downcast_ref::<sqlx::Error>() {
        return connection_broke(error);
    }
    source
        .downcast_ref::<BatchFailed>()
        .is_some_and(|batch| batch.connection_broke)
}

/// Runs `statement` (one of the safe operations of the module's docs) until it does not
/// fail on a broken connection, for at most [`RETRY_BUDGET`], pausing between tries from
/// [`FIRST_PAUSE`], doubling up to [`LONGEST_PAUSE`]. Each try takes a connection from the
/// pool again, which by then hands out none opened before the break.
pub(crate) async fn retrying<T, F, Fut>(operation: Operation, statement: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    retrying_within(RETRY_BUDGET, operation, statement).await
}

/// [`retrying`] for at most `budget`.
async fn retrying_within<T, F, Fut>(
    budget: Duration,
    operation: Operation,
    mut statement: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    let mut tries = 1u32;
    loop {
        match statement().await {
            Err(error) if broke(&error) => {
                if started.elapsed() + pause >= budget {
                    tracing::warn!(
                        %operation, tries, %error,
                        "a statement's connection broke on every try; giving up"
                    );
                    return Err(error);
                }
                tracing::debug!(
                    %operation, tries, %error,
                    "a statement's connection broke; trying again on a fresh connection"
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
                tries += 1;
            }
            outcome => return outcome,
        }
    }
}

/// Opens (and closes) one connection to the server of `options`, waiting up to `wait` for a
/// server that is not accepting connections for now ([`server_unavailable`]), with a
/// growing pause (up to [`LONGEST_PAUSE`]) and one warning when the wait begins. Any other
/// error, and a try that gets no answer within [`CONNECT_TIMEOUT`], fails at once.
pub(crate) async fn wait_for_server(options: &PgConnectOptions, wait: Duration) -> StoreResult<()> {
    // A connection that could not be opened broke none of the pooled ones: the core's
    // error mapping, which tells no pool.
    let failed = tasks_core::error::db(Operation::Connect);
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    let mut waited = false;
    loop {
        match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(options)).await {
            Ok(Ok(first)) => {
                let _ = first.close().await;
                if waited {
                    tracing::info!(
                        waited = ?started.elapsed(),
                        "the Postgres server accepts connections again"
                    );
                }
                return Ok(());
            }
            Ok(Err(error)) if server_unavailable(&error) && started.elapsed() + pause <= wait => {
                if !waited {
                    tracing::warn!(
                        %error,
                        host = options.get_host(),
                        port = options.get_port(),
                        ?wait,
                        "the Postgres server is not accepting connections; waiting for it"
                    );
                    waited = true;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            Ok(Err(error)) => return Err(failed(error)),
            Err(_) => {
                return Err(StoreError::database(
                    Operation::Connect,
                    format!("the server did not answer within {CONNECT_TIMEOUT:?}"),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;
    use std::io::{Error as IoError, ErrorKind};

    /// A server's error with a SQLSTATE, as the driver reports it.
    #[derive(Debug)]
    struct ServerError(&'static str);

    impl std::fmt::Display for ServerError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "server error {}", self.0)
        }
    }

    impl std::error::Error for ServerError {}

    impl sqlx::error::DatabaseError for ServerError {
        fn message(&self) -> &str {
            "server error"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn server(code: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(ServerError(code)))
    }

    fn io(kind: ErrorKind) -> sqlx::Error {
        sqlx::Error::Io(IoError::new(kind, "socket"))
    }

    #[test]
    fn a_session_the_server_ended_is_a_broken_connection() {
        for code in [
            "57P01", "57P02", "57P03", "08000", "08003", "08006", "08P01",
        ] {
            assert!(connection_broke(&server(code)), "{code}");
        }
        for kind in [
            ErrorKind::ConnectionReset,
            ErrorKind::BrokenPipe,
            ErrorKind::UnexpectedEof,
            ErrorKind::ConnectionRefused,
            ErrorKind::Other,
        ] {
            assert!(connection_broke(&io(kind)), "{kind:?}");
        }
    }

    #[test]
    fn a_refused_statement_is_not_a_broken_connection() {
        // Unique violation, serialization failure, statement timeout, query canceled,
        // undefined table, too many connections.
        for code in ["23505", "40001", "57014", "42P01", "53300", "57000"] {
            assert!(!connection_broke(&server(code)), "{code}");
        }
        assert!(!connection_broke(&sqlx::Error::PoolTimedOut));
        assert!(!connection_broke(&sqlx::Error::PoolClosed));
        assert!(!connection_broke(&sqlx::Error::RowNotFound));
        assert!(!connection_broke(&sqlx::Error::Protocol(
            "bad message".into()
        )));
    }

    #[test]
    fn a_server_starting_or_stopping_is_waited_for_and_a_refusal_is_not() {
        for error in [
            io(ErrorKind::ConnectionRefused),
            io(ErrorKind::NotFound),
            io(ErrorKind::ConnectionReset),
            server("57P03"),
            server("57P01"),
        ] {
            assert!(server_unavailable(&error), "{error}");
        }
        // Wrong password, no such database, no such role, TLS refused.
        for error in [
            server("28P01"),
            server("3D000"),
            server("28000"),
            sqlx::Error::Tls("handshake".into()),
            io(ErrorKind::PermissionDenied),
        ] {
            assert!(!server_unavailable(&error), "{error}");
        }
    }

    #[test]
    fn store_errors_are_classified_by_their_driver_error() {
        let broken = db(Operation::GetRun)(server("57P01"));
        assert!(broke(&broken));
        let refused = db(Operation::GetRun)(server("23505"));
        assert!(!broke(&refused));
        assert!(broke(&StoreError::database(
            Operation::RecordStepAttempt,
            BatchFailed::of(&broken)
        )));
        assert!(!broke(&StoreError::database(
            Operation::RecordStepAttempt,
            BatchFailed::of(&refused)
        )));
        assert!(!broke(&StoreError::database(
            Operation::GetRun,
            "a message only"
        )));
        assert!(!broke(&StoreError::RunNotFound {
            id: uuid::Uuid::nil()
        }));
    }

    #[tokio::test]
    async fn a_broken_connection_is_tried_again_within_the_budget() {
        let mut tries = 0;
        let outcome = retrying(Operation::GetRun, || {
            tries += 1;
            let broken = tries < 4;
            async move {
                if broken {
                    Err(db(Operation::GetRun)(io(ErrorKind::ConnectionReset)))
                } else {
                    Ok(tries)
                }
            }
        })
        .await;
        assert_eq!(outcome.unwrap(), 4);

        let budget = Duration::from_millis(400);
        let started = Instant::now();
        let mut tries = 0;
        let outcome: Result<(), _> = retrying_within(budget, Operation::GetRun, || {
            tries += 1;
            async { Err(db(Operation::GetRun)(server("57P01"))) }
        })
        .await;
        assert!(broke(&outcome.unwrap_err()));
        // Tries at 0, 50, 150 and 350 ms (later on a loaded machine); no pause passes the
        // budget.
        assert!(started.elapsed() < budget, "{:?}", started.elapsed());
        assert!((3..=4).contains(&tries), "{tries}");
    }

    #[tokio::test]
    async fn other_errors_are_not_tried_again() {
        let mut tries = 0;
        let outcome: Result<(), _> = retrying(Operation::GetRun, || {
            tries += 1;
            async { Err(db(Operation::GetRun)(server("23505"))) }
        })
        .await;
        assert!(outcome.is_err());
        assert_eq!(tries, 1);
    }
}
