//! Concurrency releases that did not reach the store, tried again (docs/scaling-out.md).
//!
//! A `concurrency` slot is given back when the response ends or the client
//! goes. If that release call fails (Redis stalled, the breaker open, a
//! timeout), the slot would stay taken until its lease expires, 5 minutes by
//! default, and every request of that key would be rejected meanwhile. So a
//! failed release is queued here and tried again in the background, with a
//! growing back-off ([`FIRST_BACKOFF`] to [`MAX_BACKOFF`]), until it
//! succeeds or its lease would have ended anyway (measured from when the
//! slot was taken). Nothing here is on a request's path: the request that
//! ended has already been answered. On Redis Cluster the leases of a
//! refund call that failed come here too (`RedisStore::on_unreleased`).
//!
//! Memory is bounded: at most `capacity` releases wait. When a new one
//! arrives at the cap, the oldest waiting one is given up (it is the
//! nearest to its lease's end, so it is the one that costs the least), and
//! its slot stays taken until its lease expires, as before this queue
//! existed. One task does the retrying while anything waits, and ends when
//! the queue is empty.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::clock::Clock;
use crate::store::redis::{RedisStore, StoreError};
use crate::{Micros, StoreKey};

/// The wait before the first retry.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two rounds of retries.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Where a lease is given back.
pub(crate) trait Release: Send + Sync + 'static {
    /// Give back `lease` of `key` at `now`.
    fn release(
        &self,
        key: &StoreKey,
        lease: u64,
        now: Micros,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl Release for RedisStore {
    async fn release(&self, key: &StoreKey, lease: u64, now: Micros) -> Result<(), StoreError> {
        // Whether the lease was still held does not matter: either way it
        // is not held any more.
        RedisStore::release(self, key, lease, now).await.map(drop)
    }
}

/// One lease to give back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pending {
    /// The (limit, client) key.
    pub key: StoreKey,
    /// The lease id.
    pub lease: u64,
    /// When the lease ends by itself (taken + `lease`): no use trying after.
    pub until: Micros,
}

/// The releases of one store, and the retries of those that failed.
pub(crate) struct Releases<R> {
    store: Arc<R>,
    clock: Arc<dyn Clock>,
    capacity: usize,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// Waiting, oldest first.
    pending: VecDeque<Pending>,
    /// A retry task is running (it empties the queue before it ends).
    running: bool,
    /// Releases given up at the cap, for the log.
    dropped: u64,
}

impl<R: Release> Releases<R> {
    /// The releases of `store`, at most `capacity` of them waiting for a
    /// retry.
    pub(crate) fn new(store: Arc<R>, clock: Arc<dyn Clock>, capacity: usize) -> Releases<R> {
        Releases {
            store,
            clock,
            capacity,
            queue: Mutex::new(Queue::default()),
        }
    }

    /// Give back `leases` now, off the caller's task; those whose call
    /// fails are retried. Without a Tokio runtime (the process is ending)
    /// nothing is sent: the leases expire by themselves.
    pub(crate) fn release(self: &Arc<Self>, leases: Vec<Pending>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        handle.spawn(async move {
            for p in leases {
                if let Err(error) = this.store.release(&p.key, p.lease, this.clock.now()).await {
                    tracing::debug!(%error, "concurrency release failed; retrying");
                    this.retry(p);
                }
            }
        });
    }

    #[cfg(test)]
    /// How many releases wait for a retry.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().pending.len()
    }

    /// Queue `p` for a retry, and start the retry task if none runs.
    fn retry(self: &Arc<Self>, p: Pending) {
        let start = {
            let mut q = self.lock();
            if self.capacity == 0 {
                return;
            }
            if q.pending.len() >= self.capacity {
                q.pending.pop_front();
                q.dropped += 1;
                // Once, then every 1000th: a stalled store under load would
                // otherwise log at the request rate.
                if q.dropped % 1000 == 1 {
                    tracing::warn!(
                        capacity = self.capacity,
                        dropped = q.dropped,
                        "too many concurrency releases waiting: the oldest is given up (its slot frees when its lease expires)"
                    );
                }
            }
            q.pending.push_back(p);
            !std::mem::replace(&mut q.running, true)
        };
        if start {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(self.clone().run());
            } else {
                self.lock().running = false;
            }
        }
    }

    /// Rounds of retries, each after a back-off that doubles while some
    /// fail, until nothing waits.
    async fn run(self: Arc<Self>) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            tokio::time::sleep(backoff).await;
            let batch: Vec<Pending> = {
                let mut q = self.lock();
                if q.pending.is_empty() {
                    q.running = false;
                    return;
                }
                q.pending.drain(..).collect()
            };
            let mut failed = Vec::new();
            for p in batch {
                let now = self.clock.now();
                if p.until <= now {
                    continue;
                }
                // Every call is bounded by the store's timeout, and once the
                // breaker opens the others fail fast: a round stays short.
                if let Err(error) = self.store.release(&p.key, p.lease, now).await {
                    tracing::debug!(%error, "concurrency release failed again");
                    failed.push(p);
                }
            }
            backoff = if failed.is_empty() {
                FIRST_BACKOFF
            } else {
                (backoff * 2).min(MAX_BACKOFF)
            };
            let mut q = self.lock();
            // Back in front of what arrived meanwhile (they are older), then
            // the cap again.
            for p in failed.into_iter().rev() {
                q.pending.push_front(p);
            }
            while q.pending.len() > self.capacity {
                q.pending.pop_front();
                q.dropped += 1;
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::SECOND;
    use crate::clock::ManualClock;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A store that fails while `down`, and records what it released.
    #[derive(Default)]
    struct Fake {
        down: AtomicBool,
        released: Mutex<Vec<u64>>,
        calls: std::sync::atomic::AtomicUsize,
    }

    impl Release for Fake {
        async fn release(
            &self,
            _key: &StoreKey,
            lease: u64,
            _now: Micros,
        ) -> Result<(), StoreError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Timeout);
            }
            self.released.lock().unwrap().push(lease);
            Ok(())
        }
    }

    const T0: Micros = 1_700_000_000 * SECOND;

    fn pending(lease: u64, until: Micros) -> Pending {
        Pending {
            key: [lease as u8; 16],
            lease,
            until,
        }
    }

    fn setup(capacity: usize) -> (Arc<Fake>, Arc<ManualClock>, Arc<Releases<Fake>>) {
        let fake = Arc::new(Fake::default());
        let clock = Arc::new(ManualClock::new(T0));
        let releases = Arc::new(Releases::new(fake.clone(), clock.clone(), capacity));
        (fake, clock, releases)
    }

    /// Lets the spawned tasks run, `ms` of (paused) Tokio time at a time.
    async fn run_for(ms: u64) {
        for _ in 0..ms / 10 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_release_is_retried_until_it_succeeds() {
        let (fake, _clock, releases) = setup(10);
        fake.down.store(true, Ordering::SeqCst);
        releases.release(vec![
            pending(1, T0 + 300 * SECOND),
            pending(2, T0 + 300 * SECOND),
        ]);
        run_for(5_000).await;
        assert!(fake.released.lock().unwrap().is_empty());
        assert_eq!(releases.waiting(), 2);
        let calls = fake.calls.load(Ordering::SeqCst);
        // 5 s of back-off capped at 1 s: a handful of rounds, not a flood.
        assert!((6..=20).contains(&calls), "{calls} calls in 5 s");
        fake.down.store(false, Ordering::SeqCst);
        run_for(1_100).await;
        assert_eq!(*fake.released.lock().unwrap(), [1, 2]);
        assert_eq!(releases.waiting(), 0);
        // The task ended; a later failure starts another.
        assert!(!releases.lock().running);
        fake.down.store(true, Ordering::SeqCst);
        releases.release(vec![pending(3, T0 + 300 * SECOND)]);
        run_for(50).await;
        fake.down.store(false, Ordering::SeqCst);
        run_for(200).await;
        assert_eq!(*fake.released.lock().unwrap(), [1, 2, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_when_the_lease_would_have_ended() {
        let (fake, clock, releases) = setup(10);
        fake.down.store(true, Ordering::SeqCst);
        releases.release(vec![pending(1, T0 + 2 * SECOND)]);
        run_for(1_000).await;
        assert_eq!(releases.waiting(), 1);
        clock.set(T0 + 2 * SECOND);
        run_for(1_100).await;
        assert_eq!(releases.waiting(), 0, "expired: given up");
        let calls = fake.calls.load(Ordering::SeqCst);
        run_for(3_000).await;
        assert_eq!(fake.calls.load(Ordering::SeqCst), calls, "no more calls");
        assert!(!releases.lock().running);
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_the_oldest_is_given_up() {
        let (fake, _clock, releases) = setup(3);
        fake.down.store(true, Ordering::SeqCst);
        for lease in 1..=5 {
            releases.release(vec![pending(lease, T0 + 300 * SECOND)]);
            run_for(10).await;
        }
        assert_eq!(releases.waiting(), 3);
        assert_eq!(releases.lock().dropped, 2);
        fake.down.store(false, Ordering::SeqCst);
        run_for(1_100).await;
        assert_eq!(*fake.released.lock().unwrap(), [3, 4, 5]);
    }
}
