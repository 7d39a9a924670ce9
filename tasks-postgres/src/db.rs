//! Where the store's statements run: the pool, or one of the store's transactions, in the
//! way the [`Pooling`] of the store allows.
//!
//! With [`Pooling::Session`] every statement runs as sqlx runs it: a statement outside a
//! transaction commits on its own, and its text is prepared once per connection as a named
//! statement that later runs reuse.
//!
//! With [`Pooling::Transaction`] (a pooler that lends a server connection for one
//! transaction only, such as PgBouncer's `pool_mode = transaction`) neither holds: a named
//! statement prepared in one transaction may be missing, or another client's, on the server
//! connection of the next; and sqlx sends a statement with parameters as two exchanges (parse
//! and describe, then bind and execute), each ended by a `Sync` after which the pooler may
//! hand the next exchange to another server connection. So in that mode:
//!
//! - every statement runs inside a transaction (a statement that commits on its own today
//!   gets a transaction of its own), so that both exchanges reach the same server connection;
//! - every statement is prepared as the unnamed statement, which lives until the next one is
//!   prepared, so nothing prepared outlives the transaction on the server or in the driver;
//! - each transaction begins with [`POOLED_BEGIN`], which sets, for that transaction only,
//!   what a direct connection sets once per session (see [`crate::PgStore::pool_options`]).
//!
//! The store reaches the database only through [`Db`] (as an [`Executor`], or by
//! [`Db::begin`] and [`Db::acquire`]), so the rule is kept in this module alone.

use crate::pooling::Pooling;
use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{Describe, Either, Execute, Executor, PgConnection, PgPool, Postgres, Transaction};
use std::ops::{Deref, DerefMut};

/// The settings of [`POOLED_BEGIN`], for a transaction that begins otherwise
/// ([`Db::begin_with`]).
macro_rules! pooled_settings {
    () => {
        "SET LOCAL jit = off; SET LOCAL idle_in_transaction_session_timeout = '60s'"
    };
}

/// How every transaction of the store begins with [`Pooling::Transaction`]: the settings a
/// direct connection takes once per session (`jit = off`, and
/// [`IDLE_IN_TRANSACTION_TIMEOUT`](crate::IDLE_IN_TRANSACTION_TIMEOUT)), set for the
/// transaction only (`SET LOCAL`), in the same round trip as the `BEGIN`. A pooler in
/// transaction mode keeps no session state of a client: a plain `SET` would change
/// whichever server connection it ran on, for every later client of that connection.
pub(crate) const POOLED_BEGIN: &str = concat!("BEGIN; ", pooled_settings!());

/// The store's handle on its database: the pool, and how statements may use it.
#[derive(Clone)]
pub(crate) struct Db {
    pool: PgPool,
    pooling: Pooling,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("pooling", &self.pooling)
            .finish_non_exhaustive()
    }
}

impl Db {
    pub(crate) fn new(pool: PgPool, pooling: Pooling) -> Self {
        Db { pool, pooling }
    }

    /// The pool.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// How the store's connections reach the server.
    pub(crate) fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Begins a transaction.
    pub(crate) async fn begin(&self) -> Result<Tx, sqlx::Error> {
        let tx = match self.pooling {
            Pooling::Session => self.pool.begin().await?,
            Pooling::Transaction => self.pool.begin_with(POOLED_BEGIN).await?,
        };
        Ok(Tx(Conn {
            inner: Inner::Transaction(tx),
            unnamed: self.pooling == Pooling::Transaction,
        }))
    }

    /// Begins a transaction with `begin`, a simple query that begins it (`BEGIN` and
    /// `SET LOCAL` settings of its own); with [`Pooling::Transaction`] the store's settings
    /// of [`POOLED_BEGIN`] follow in the same round trip.
    pub(crate) async fn begin_with(&self, begin: &'static str) -> Result<Tx, sqlx::Error> {
        let tx = match self.pooling {
            Pooling::Session => self.pool.begin_with(begin).await?,
            Pooling::Transaction => {
                self.pool
                    .begin_with(format!("{begin}; {}", pooled_settings!()))
                    .await?
            }
        };
        Ok(Tx(Conn {
            inner: Inner::Transaction(tx),
            unnamed: self.pooling == Pooling::Transaction,
        }))
    }

    /// A connection for a few statements in a row, each of which commits on its own where
    /// the pooling allows it ([`Pooling::Session`]); through a transaction pooler they share a
    /// transaction instead. Either way, [`Tx::commit`] when done.
    pub(crate) async fn acquire(&self) -> Result<Tx, sqlx::Error> {
        match self.pooling {
            Pooling::Session => Ok(Tx(Conn {
                inner: Inner::Connection(self.pool.acquire().await?),
                unnamed: false,
            })),
            Pooling::Transaction => self.begin().await,
        }
    }
}

/// A statement run with the unnamed prepared statement: the driver keeps nothing of it.
struct Unnamed<E>(E);

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(&self) -> &'q str {
        self.0.sql()
    }

    fn statement(&self) -> Option<&PgStatement<'q>> {
        self.0.statement()
    }

    fn take_arguments(
        &mut self,
    ) -> Result<Option<sqlx::postgres::PgArguments>, sqlx::error::BoxDynError> {
        self.0.take_arguments()
    }

    fn persistent(&self) -> bool {
        false
    }
}

type Items = Vec<Either<PgQueryResult, PgRow>>;

/// Runs `query` in a transaction of its own on a connection of `pool` ([`Pooling::Transaction`]).
async fn in_own_transaction<'q, E>(pool: PgPool, query: E) -> Result<Items, sqlx::Error>
where
    E: 'q + Execute<'q, Postgres>,
{
    let mut tx = pool.begin_with(POOLED_BEGIN).await?;
    let items = (&mut *tx).fetch_many(Unnamed(query)).try_collect().await?;
    tx.commit().await?;
    Ok(items)
}

impl<'p> Executor<'p> for &'_ Db {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        E: 'q + Execute<'q, Postgres>,
    {
        match self.pooling {
            Pooling::Session => self.pool.fetch_many(query),
            Pooling::Transaction => {
                // Collected before the commit: the store's statements return bounded rows.
                stream::once(in_own_transaction(self.pool.clone(), query))
                    .map(|outcome| match outcome {
                        Ok(items) => stream::iter(items.into_iter().map(Ok)).left_stream(),
                        Err(error) => stream::iter([Err(error)]).right_stream(),
                    })
                    .flatten()
                    .boxed()
            }
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        E: 'q + Execute<'q, Postgres>,
    {
        match self.pooling {
            Pooling::Session => self.pool.fetch_optional(query),
            Pooling::Transaction => {
                let pool = self.pool.clone();
                Box::pin(async move {
                    let mut tx = pool.begin_with(POOLED_BEGIN).await?;
                    let row = (&mut *tx).fetch_optional(Unnamed(query)).await?;
                    tx.commit().await?;
                    Ok(row)
                })
            }
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>> {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>> {
        self.pool.describe(sql)
    }
}

/// What a [`Conn`] holds.
enum Inner {
    Transaction(Transaction<'static, Postgres>),
    Connection(PoolConnection<Postgres>),
}

/// A connection of the store's, in a transaction or not (see [`Db::acquire`]); an
/// [`Executor`] that runs statements as its pooling allows.
pub(crate) struct Conn {
    inner: Inner,
    /// Statements are prepared as the unnamed statement ([`Pooling::Transaction`]).
    unnamed: bool,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("unnamed", &self.unnamed)
            .finish_non_exhaustive()
    }
}

impl Conn {
    fn raw(&mut self) -> &mut PgConnection {
        match &mut self.inner {
            Inner::Transaction(tx) => tx,
            Inner::Connection(conn) => conn,
        }
    }
}

impl<'c> Executor<'c> for &'c mut Conn {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let unnamed = self.unnamed;
        let conn = self.raw();
        if unnamed {
            conn.fetch_many(Unnamed(query))
        } else {
            conn.fetch_many(query)
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let unnamed = self.unnamed;
        let conn = self.raw();
        if unnamed {
            conn.fetch_optional(Unnamed(query))
        } else {
            conn.fetch_optional(query)
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.raw().prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.raw().describe(sql)
    }
}

/// A caller's connection ([`crate::create_run_in`]) whose statements run as the unnamed
/// statement, for a caller that reaches the server through a transaction pooler.
pub(crate) struct UnnamedConn<'a>(pub(crate) &'a mut PgConnection);

impl std::fmt::Debug for UnnamedConn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnnamedConn").finish_non_exhaustive()
    }
}

impl<'c> Executor<'c> for &'c mut UnnamedConn<'_> {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        (&mut *self.0).fetch_many(Unnamed(query))
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        (&mut *self.0).fetch_optional(Unnamed(query))
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.0).prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.0).describe(sql)
    }
}

/// A transaction of the store ([`Db::begin`]), or a connection for a few statements
/// ([`Db::acquire`]): run statements on `&mut *tx`, then [`Tx::commit`]. Dropped without
/// committing, a transaction rolls back.
pub(crate) struct Tx(Conn);

impl Tx {
    /// Commits the transaction (a connection of [`Db::acquire`] that holds none goes back
    /// to the pool).
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        match self.0.inner {
            Inner::Transaction(tx) => tx.commit().await,
            Inner::Connection(_) => Ok(()),
        }
    }
}

impl Deref for Tx {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        &self.0
    }
}

impl DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut Conn {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pooled_begin_sets_the_session_settings_of_a_direct_connection() {
        assert_eq!(crate::IDLE_IN_TRANSACTION_TIMEOUT.as_secs(), 60);
        assert!(POOLED_BEGIN.starts_with("BEGIN;"));
        assert!(POOLED_BEGIN.contains("SET LOCAL jit = off"));
        assert!(POOLED_BEGIN.contains("SET LOCAL idle_in_transaction_session_timeout = '60s'"));
    }
}
