//! The store's connection settings beyond the URL: how its connections reach the server
//! ([`Pooling`]) and where it listens for wake-ups ([`PgOptions::listen_url`]).

use sqlx::postgres::PgConnectOptions;
use std::borrow::Cow;
use tasks_core::error::{StoreError, StoreResult};

/// How the store's connections reach the Postgres server.
///
/// See the guide's chapter on stores, "Behind PgBouncer".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Pooling {
    /// Each pooled connection is one server session for as long as it lives: a direct
    /// connection, or a pooler in session mode (PgBouncer's `pool_mode = session`). The
    /// store sets its session settings once per connection, prepares each statement once
    /// per connection and reuses it, and listens for wake-ups on one of the pool's
    /// connections. The default.
    #[default]
    Session,
    /// Through a pooler that lends a server connection for one transaction at a time
    /// (PgBouncer's `pool_mode = transaction`): the store relies on no session state. Every
    /// statement runs in a transaction (one of its own where it would otherwise commit
    /// alone), is prepared as the unnamed statement (nothing prepared outlives the
    /// transaction), and the store's settings are set per transaction (`SET LOCAL`). The
    /// pooler's own prepared-statement support (`max_prepared_statements`) is neither needed
    /// nor disturbed. `LISTEN` needs a session: give the store a direct
    /// [`listen_url`](PgOptions::listen_url), or it does without wake-ups and its workers find
    /// new runs by polling. Costs round trips: see the benchmark's "through PgBouncer" row.
    Transaction,
}

impl Pooling {
    /// The value of the URL parameter [`POOLING_PARAMETER`] for this pooling.
    pub fn as_str(self) -> &'static str {
        match self {
            Pooling::Session => "session",
            Pooling::Transaction => "transaction",
        }
    }
}

impl Pooling {
    /// `options` as this pooling needs them. With [`Pooling::Transaction`]: no statement
    /// cache (the store prepares its statements as the unnamed statement anyway; this keeps
    /// the driver's own catalog queries from leaving named statements cached), and no
    /// `extra_float_digits` startup parameter, which PgBouncer refuses unless told to
    /// ignore it (the store reads no floating-point value as text). [`PgStore::connect`]
    /// applies it; a pool built by hand for this pooling should too.
    ///
    /// [`PgStore::connect`]: crate::PgStore::connect
    pub fn connect_options(self, options: PgConnectOptions) -> PgConnectOptions {
        match self {
            Pooling::Session => options,
            Pooling::Transaction => options.statement_cache_capacity(0).extra_float_digits(None),
        }
    }
}

impl std::fmt::Display for Pooling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Pooling {
    type Err = StoreError;

    fn from_str(value: &str) -> StoreResult<Self> {
        match value {
            "session" => Ok(Pooling::Session),
            "transaction" => Ok(Pooling::Transaction),
            other => Err(StoreError::InvalidArgument(format!(
                "{POOLING_PARAMETER} must be `session` or `transaction`, not {other:?}"
            ))),
        }
    }
}

/// The URL query parameter that chooses the [`Pooling`] of [`PgStore::connect`]
/// (`…?tasks_pooling=transaction`). The store takes it out of the URL before the driver
/// reads it.
///
/// [`PgStore::connect`]: crate::PgStore::connect
pub const POOLING_PARAMETER: &str = "tasks_pooling";

/// The URL query parameter that gives [`PgStore::connect`] a [listen
/// URL](PgOptions::listen_url), percent-encoded
/// (`…?tasks_pooling=transaction&tasks_listen_url=postgres%3A%2F%2Fapp%40db%3A5432%2Fapp`).
/// The store takes it out of the URL before the driver reads it.
///
/// [`PgStore::connect`]: crate::PgStore::connect
pub const LISTEN_URL_PARAMETER: &str = "tasks_listen_url";

/// The settings of [`PgStore::connect_with`](crate::PgStore::connect_with) and
/// [`PgStore::new_with`](crate::PgStore::new_with) beyond the URL.
///
/// ```
/// use tasks_postgres::{PgOptions, Pooling};
///
/// let options = PgOptions::new()
///     .pooling(Pooling::Transaction)
///     .listen_url("postgres://app@db.internal:5432/app");
/// assert_eq!(options.get_pooling(), Pooling::Transaction);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgOptions {
    pooling: Pooling,
    listen_url: Option<String>,
}

impl PgOptions {
    /// The defaults: [`Pooling::Session`], listening on the pool.
    pub fn new() -> Self {
        PgOptions::default()
    }

    /// How the store's connections reach the server.
    pub fn pooling(mut self, pooling: Pooling) -> Self {
        self.pooling = pooling;
        self
    }

    /// A `postgres://` URL of the same database that reaches the server directly (or
    /// through a pooler in session mode), for the store's `LISTEN`: the one connection that
    /// must stay a session. Without one, a store with [`Pooling::Session`] listens on a
    /// connection of its pool, and a store with [`Pooling::Transaction`] does not listen
    /// (it says so once, in a warning): its workers find new runs by polling, and waits for
    /// results read the run again every few seconds.
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// The pooling chosen.
    pub fn get_pooling(&self) -> Pooling {
        self.pooling
    }

    /// The listen URL given, if any.
    pub fn get_listen_url(&self) -> Option<&str> {
        self.listen_url.as_deref()
    }

    /// Takes [`POOLING_PARAMETER`] and [`LISTEN_URL_PARAMETER`] out of `url`, into these
    /// options (a parameter in the URL wins over the option), and returns the rest of the
    /// URL for the driver.
    pub(crate) fn take_from_url<'u>(&mut self, url: &'u str) -> StoreResult<Cow<'u, str>> {
        if !url.contains(POOLING_PARAMETER) && !url.contains(LISTEN_URL_PARAMETER) {
            return Ok(Cow::Borrowed(url));
        }
        let mut parsed = url::Url::parse(url)
            .map_err(|error| StoreError::InvalidArgument(format!("a Postgres URL: {error}")))?;
        let mut kept = Vec::new();
        for (key, value) in parsed.query_pairs() {
            match &*key {
                POOLING_PARAMETER => self.pooling = value.parse()?,
                LISTEN_URL_PARAMETER => self.listen_url = Some(value.into_owned()),
                _ => kept.push((key.into_owned(), value.into_owned())),
            }
        }
        if kept.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(kept);
        }
        Ok(Cow::Owned(parsed.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_parameters_are_taken_out_and_the_rest_is_kept() {
        let mut options = PgOptions::new();
        let url = options
            .take_from_url(
                "postgres://app:secret@bouncer:6432/app?sslmode=disable&tasks_pooling=transaction\
                 &tasks_listen_url=postgres%3A%2F%2Fapp%3Asecret%40db%3A5432%2Fapp",
            )
            .unwrap();
        assert_eq!(
            url,
            "postgres://app:secret@bouncer:6432/app?sslmode=disable"
        );
        assert_eq!(options.get_pooling(), Pooling::Transaction);
        assert_eq!(
            options.get_listen_url(),
            Some("postgres://app:secret@db:5432/app")
        );

        let mut options = PgOptions::new().pooling(Pooling::Transaction);
        let url = options
            .take_from_url("postgres://app@db/app?tasks_pooling=session")
            .unwrap();
        assert_eq!(url, "postgres://app@db/app");
        assert_eq!(options.get_pooling(), Pooling::Session);
    }

    #[test]
    fn a_url_without_the_parameters_is_untouched() {
        let mut options = PgOptions::new().listen_url("postgres://direct/app");
        let url = "postgres://app@db/app?application_name=x";
        assert!(matches!(options.take_from_url(url).unwrap(), Cow::Borrowed(u) if u == url));
        assert_eq!(
            options,
            PgOptions::new().listen_url("postgres://direct/app")
        );
    }

    #[test]
    fn an_unknown_pooling_is_refused() {
        let error = PgOptions::new()
            .take_from_url("postgres://app@db/app?tasks_pooling=statement")
            .unwrap_err();
        assert!(matches!(error, StoreError::InvalidArgument(_)), "{error}");
        assert!(error.to_string().contains("statement"), "{error}");
    }
}
