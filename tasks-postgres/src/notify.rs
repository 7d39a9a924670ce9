//! Wake-ups over LISTEN/NOTIFY.
//!
//! One listener connection per pool feeds a broadcast channel; every subscriber filters it by
//! namespace. When the listener connection drops, it reconnects and sends every subscriber a
//! synthetic "run available" so that nothing waits on a notification that was lost.

use crate::background::{Background, Task};
use crate::db::Db;
use crate::pooling::Pooling;
use crate::reconnect::db;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::model::RunStatus;
use tasks_core::store::{Notification, NotificationStream, namespace_stream};
use tokio::sync::{Mutex, broadcast};
use tokio::task::JoinHandle;
use uuid::Uuid;

/// The channel every notification of ours travels on.
pub(crate) const CHANNEL: &str = "tasks_events";

#[derive(Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum Payload {
    Available {
        ns: String,
    },
    Finished {
        ns: String,
        run: Uuid,
    },
    Status {
        ns: String,
        run: Uuid,
        st: RunStatus,
    },
    State {
        ns: String,
        run: Uuid,
        key: String,
        v: u64,
    },
}

/// A payload as sent: the notification, and the hub that already handed it to the
/// subscribers of its own process (see [`Hub::deliver_here`]), whose listener skips it.
#[derive(Serialize, Deserialize)]
struct Envelope {
    #[serde(flatten)]
    body: Payload,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    o: Option<u64>,
}

/// What the hub broadcasts: a notification, or "the connection dropped, re-check everything".
#[derive(Debug, Clone)]
enum Event {
    Notification(Notification),
    Reconnected,
}

/// The `NOTIFY` payload of `notification`; `origin` names the hub that delivered it in its
/// own process already (see [`Hub::deliver_here`]).
pub(crate) fn payload(notification: &Notification, origin: Option<u64>) -> String {
    let body = match notification {
        Notification::RunAvailable { namespace } => Payload::Available {
            ns: namespace.clone(),
        },
        Notification::RunFinished { namespace, run_id } => Payload::Finished {
            ns: namespace.clone(),
            run: *run_id,
        },
        Notification::StatusChanged {
            namespace,
            run_id,
            status,
        } => Payload::Status {
            ns: namespace.clone(),
            run: *run_id,
            st: *status,
        },
        Notification::StateChanged {
            namespace,
            run_id,
            key,
            version,
        } => Payload::State {
            ns: namespace.clone(),
            run: *run_id,
            key: key.clone(),
            v: *version,
        },
        // Only listeners produce this one; sending it means "everyone, look again". So
        // does a notification this store does not know how to carry: its subscribers look
        // at the store again, which is never wrong, only slower.
        Notification::Missed { namespace } => Payload::Available {
            ns: namespace.clone(),
        },
        other => Payload::Available {
            ns: other.namespace().to_owned(),
        },
    };
    serde_json::to_string(&Envelope { body, o: origin }).unwrap_or_default()
}

/// Sends the wake-ups that store operations emit, outside their transactions and coalesced:
/// whatever queues up while one `pg_notify` round trip is in flight goes out in the next
/// single statement. An idle store sends at once, so latency does not suffer; a busy one
/// pays one commit for many notifications instead of one each.
pub(crate) struct Batcher {
    pool: Db,
    background: Arc<Background>,
    queue: Task<tokio::sync::mpsc::UnboundedSender<String>>,
}

/// The statement that sends many notifications at once: `$1` the channel, `$2` the payloads.
pub(crate) const NOTIFY_ALL: &str =
    "SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload";

/// Most notifications sent in one statement.
const BATCH: usize = 256;

impl Batcher {
    pub(crate) fn new(pool: Db, background: Arc<Background>) -> Self {
        Batcher {
            pool,
            background,
            queue: Task::new("wake-up sender"),
        }
    }

    /// Queues `payloads` when the sender is already running (a worker started it); `false`
    /// when it is not, and nothing was queued.
    pub(crate) fn try_send(&self, payloads: &[String]) -> bool {
        match self.queue.running() {
            Some(queue) => payloads
                .iter()
                .all(|payload| queue.send(payload.clone()).is_ok()),
            None => false,
        }
    }

    /// Queues `payload` (see [`payload`]); never waits for the database.
    pub(crate) fn send(&self, payload: String) {
        if self.background.is_closed() {
            tracing::debug!("the store was closed; no wake-up sent");
            return;
        }
        let queue = self.queue.get_or_start(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            (tx, self.background.spawn(drain(self.pool.clone(), rx)))
        });
        // The drain task only stops when every sender is gone, so this cannot fail while
        // `self` is alive.
        let _ = queue.send(payload);
    }
}

async fn drain(pool: Db, mut queue: tokio::sync::mpsc::UnboundedReceiver<String>) {
    let mut batch = Vec::with_capacity(BATCH);
    while queue.recv_many(&mut batch, BATCH).await > 0 {
        batch.sort_unstable();
        batch.dedup();
        let sent = sqlx::query(NOTIFY_ALL)
            .bind(CHANNEL)
            .bind(&batch)
            .execute(&pool)
            .await;
        if let Err(error) = sent {
            tracing::warn!(%error, count = batch.len(), "could not publish wake-ups; workers will find the runs by polling");
        }
        batch.clear();
    }
}

/// The broadcast channel a running pump feeds, and the pump.
type Pump = (Arc<broadcast::Sender<Event>>, JoinHandle<()>);

pub(crate) struct Hub {
    pool: Db,
    /// Where to `LISTEN` instead of on the pool ([`crate::PgOptions::listen_url`]).
    listen_url: Option<String>,
    /// Whether the store said that it does not listen (once).
    said_polling: AtomicBool,
    background: Arc<Background>,
    /// The channel the pump feeds, and the pump.
    sender: Mutex<Option<Pump>>,
    /// The same channel, for [`Hub::deliver_here`]: a synchronous handle, never the pump's
    /// owner.
    local: std::sync::Mutex<Weak<broadcast::Sender<Event>>>,
    /// This hub, in the payloads it delivered itself, so that its listener skips them.
    origin: u64,
}

impl Hub {
    pub(crate) fn new(pool: Db, listen_url: Option<String>, background: Arc<Background>) -> Self {
        Hub {
            pool,
            listen_url,
            said_polling: AtomicBool::new(false),
            background,
            sender: Mutex::new(None),
            local: std::sync::Mutex::new(Weak::new()),
            origin: Uuid::new_v4().as_u64_pair().0,
        }
    }

    /// Hands what this store announced, after its write committed, to the subscribers of
    /// this process at once, without waiting for the `NOTIFY` to travel through the server
    /// and back to the listener: a worker of this process claims the run it just started,
    /// and a waiter of this process reads the result of a run it just finished, a commit
    /// and a round trip sooner. The `NOTIFY` is still sent for every other process:
    /// `Some(origin)` when the notifications were delivered here, to be put in their
    /// payloads ([`payload`]), so that this hub's listener skips them when they come back
    /// and no subscriber hears one twice; `None` when nobody here listens.
    pub(crate) fn deliver_here(&self, notifications: &[Notification]) -> Option<u64> {
        let tx = self.local.lock().ok().and_then(|local| local.upgrade())?;
        let mut delivered = false;
        for notification in notifications {
            delivered |= tx.send(Event::Notification(notification.clone())).is_ok();
        }
        delivered.then_some(self.origin)
    }

    pub(crate) async fn subscribe(&self, namespace: String) -> StoreResult<NotificationStream> {
        if self.background.is_closed() {
            return Err(StoreError::database(
                Operation::Subscribe,
                "the store was closed",
            ));
        }
        if self.listen_url.is_none() && self.pool.pooling() == Pooling::Transaction {
            // `LISTEN` needs a session, which a transaction pooler does not keep: nothing
            // to listen on. The stream never yields; callers read the store again on their
            // own schedule (workers poll, waits re-read).
            if !self.said_polling.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "the Postgres store reaches the server through a transaction pooler and \
                     has no listen URL: it does not LISTEN, and workers find new runs by \
                     polling (give it a direct `listen_url` for wake-ups)"
                );
            }
            return Ok(Box::pin(futures::stream::pending()));
        }
        let mut sender = self.sender.lock().await;
        let running = match sender.as_ref() {
            Some((tx, pump)) if !pump.is_finished() => Some(tx.clone()),
            Some(_) => {
                tracing::warn!(
                    "the notification listener of the Postgres store ended (did the Tokio \
                     runtime it ran on shut down?); starting it again on this runtime"
                );
                None
            }
            None => None,
        };
        let tx = match running {
            Some(tx) => tx,
            None => {
                let mut listener = match &self.listen_url {
                    Some(url) => PgListener::connect(url).await,
                    None => PgListener::connect_with(self.pool.pool()).await,
                }
                .map_err(db(Operation::Subscribe))?;
                listener
                    .listen(CHANNEL)
                    .await
                    .map_err(db(Operation::Subscribe))?;
                let (tx, _) = broadcast::channel(1024);
                let tx = Arc::new(tx);
                let pump = self
                    .background
                    .spawn(pump(listener, Arc::downgrade(&tx), self.origin));
                if let Ok(mut local) = self.local.lock() {
                    *local = Arc::downgrade(&tx);
                }
                *sender = Some((tx.clone(), pump));
                tx
            }
        };
        Ok(stream(tx.subscribe(), namespace))
    }
}

/// Forwards notifications from the listener connection to the broadcast channel until the
/// store (which owns the only strong reference to the sender) is dropped.
/// Skips the payloads that name `origin`: its hub delivered them already.
async fn pump(mut listener: PgListener, sender: Weak<broadcast::Sender<Event>>, origin: u64) {
    loop {
        let received = tokio::time::timeout(Duration::from_secs(1), listener.try_recv()).await;
        let Some(tx) = sender.upgrade() else { return };
        match received {
            Err(_elapsed) => continue,
            Ok(Ok(Some(message))) => {
                if let Ok(envelope) = serde_json::from_str::<Envelope>(message.payload()) {
                    if envelope.o == Some(origin) {
                        continue;
                    }
                    let notification = match envelope.body {
                        Payload::Available { ns } => Notification::RunAvailable { namespace: ns },
                        Payload::Finished { ns, run } => Notification::RunFinished {
                            namespace: ns,
                            run_id: run,
                        },
                        Payload::Status { ns, run, st } => Notification::StatusChanged {
                            namespace: ns,
                            run_id: run,
                            status: st,
                        },
                        Payload::State { ns, run, key, v } => Notification::StateChanged {
                            namespace: ns,
                            run_id: run,
                            key,
                            version: v,
                        },
                    };
                    let _ = tx.send(Event::Notification(notification));
                }
            }
            Ok(Ok(None)) => {
                // The connection dropped; try_recv reconnects on the next call. Anything sent
                // meanwhile is lost, so tell everyone to look again. Most often the server
                // restarted: the pooled connections are stale too, and the listener, always
                // reading, is the first to know.
                tracing::warn!("notification listener lost its connection; reconnecting");
                crate::stale::note_broken_connection(
                    &"the notification listener's connection closed",
                );
                let _ = tx.send(Event::Reconnected);
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "notification listener failed; retrying in 1s");
                if crate::reconnect::connection_broke(&error) {
                    crate::stale::note_broken_connection(&error);
                }
                let _ = tx.send(Event::Reconnected);
                drop(tx);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn stream(receiver: broadcast::Receiver<Event>, namespace: String) -> NotificationStream {
    namespace_stream(receiver, namespace, |event| match event {
        Event::Notification(notification) => Some(notification),
        Event::Reconnected => None,
    })
}
