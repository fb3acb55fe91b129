//! Top offenders: per limit, the clients rejected most in the last ten
//! minutes, in memory that does not grow with the number of clients.
//!
//! Each limit keeps ten one-minute buckets; each bucket is a Space-Saving
//! summary (Metwally, Agrawal, El Abbadi, "Efficient Computation of Frequent
//! and Top-k Elements in Data Streams", 2005) of at most [`PER_BUCKET`]
//! clients: a client already counted gains one; a new one takes a free
//! place, or the place of the least-counted client with that count plus one
//! (so a count overestimates by at most the count it replaced, kept as its
//! `error`). A client rejected more often than 1/[`PER_BUCKET`] of a
//! minute's rejections is always in that minute's summary. The answer sums
//! each client's counts over the buckets of the last ten minutes.
//!
//! The pipeline feeds each limit's rejections (the client's store key and
//! display form); `GET /top` reads them (docs/operations.md).

use std::collections::HashMap;

use tollgate_limit::StoreKey;

/// Clients one bucket (one minute of one limit) keeps at most.
pub const PER_BUCKET: usize = 100;
/// Buckets kept: ten minutes.
const BUCKETS: usize = 10;
/// One bucket's span, in seconds.
const BUCKET_SECS: u64 = 60;

/// One client in a summary.
#[derive(Debug, Clone)]
struct Counted {
    key: StoreKey,
    display: Box<str>,
    count: u64,
    /// How much of `count` may belong to the clients it replaced.
    error: u64,
}

/// One minute's summary.
#[derive(Debug, Default)]
struct Bucket {
    /// Which minute (seconds since the epoch / 60); a stale one is reset.
    minute: u64,
    entries: Vec<Counted>,
}

impl Bucket {
    fn add(&mut self, key: StoreKey, display: impl FnOnce() -> String) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == key) {
            e.count += 1;
            return;
        }
        if self.entries.len() < PER_BUCKET {
            self.entries.push(Counted {
                key,
                display: display().into(),
                count: 1,
                error: 0,
            });
            return;
        }
        // Full: the least-counted client's place.
        if let Some(min) = self.entries.iter_mut().min_by_key(|e| e.count) {
            let floor = min.count;
            *min = Counted {
                key,
                display: display().into(),
                count: floor + 1,
                error: floor,
            };
        }
    }
}

/// One limit's ten minutes.
#[derive(Debug, Default)]
pub struct Offenders {
    buckets: [Bucket; BUCKETS],
}

/// A client in the answer: its display key, its rejections in the last ten
/// minutes (an upper bound), and how much of that may be others'.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Offender {
    /// The client key as the admin API shows it.
    pub key: String,
    /// Rejections counted (at most `error` more than the truth).
    pub rejected: u64,
    /// The most the count may overestimate.
    pub error: u64,
}

impl Offenders {
    /// One rejection of the client `key` at `now_secs` (seconds since the
    /// epoch); `display` names it, asked only when it enters a summary.
    pub fn rejected(&mut self, key: StoreKey, display: impl FnOnce() -> String, now_secs: u64) {
        let minute = now_secs / BUCKET_SECS;
        let bucket = &mut self.buckets[(minute % BUCKETS as u64) as usize];
        if bucket.minute != minute {
            bucket.minute = minute;
            bucket.entries.clear();
        }
        bucket.add(key, display);
    }

    /// The `n` clients rejected most in the ten minutes up to `now_secs`,
    /// most first (ties by key).
    pub fn top(&self, n: usize, now_secs: u64) -> Vec<Offender> {
        let minute = now_secs / BUCKET_SECS;
        let mut sums: HashMap<StoreKey, Offender> = HashMap::new();
        for b in &self.buckets {
            if b.entries.is_empty() || minute.saturating_sub(b.minute) >= BUCKETS as u64 {
                continue;
            }
            for e in &b.entries {
                let o = sums.entry(e.key).or_insert_with(|| Offender {
                    key: e.display.to_string(),
                    rejected: 0,
                    error: 0,
                });
                o.rejected += e.count;
                o.error += e.error;
            }
        }
        let mut list: Vec<Offender> = sums.into_values().collect();
        list.sort_by(|a, b| b.rejected.cmp(&a.rejected).then_with(|| a.key.cmp(&b.key)));
        list.truncate(n);
        list
    }

    /// Clients held in all buckets (at most `PER_BUCKET` x 10).
    pub fn len(&self) -> usize {
        self.buckets.iter().map(|b| b.entries.len()).sum()
    }

    /// Whether it holds no client.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> StoreKey {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&n.to_be_bytes());
        k
    }

    #[test]
    fn counts_per_client_over_ten_minutes() {
        let mut o = Offenders::default();
        let t = 1_800_000_000;
        for i in 0..5 {
            o.rejected(key(1), || "ann".into(), t + i);
        }
        o.rejected(key(2), || "bob".into(), t + 61);
        o.rejected(key(1), || "ann".into(), t + 125);
        let top = o.top(10, t + 130);
        assert_eq!(
            top,
            vec![
                Offender {
                    key: "ann".into(),
                    rejected: 6,
                    error: 0
                },
                Offender {
                    key: "bob".into(),
                    rejected: 1,
                    error: 0
                },
            ]
        );
        // Ten minutes on, the first minute is gone; eleven, all of it.
        assert_eq!(o.top(10, t + 600)[0].rejected, 1);
        assert!(o.top(10, t + 60 * 13).is_empty());
        // A bucket a new minute reuses starts empty.
        o.rejected(key(3), || "cy".into(), t + 600);
        assert_eq!(o.top(10, t + 600).len(), 3, "minute 0's bucket was reset");
    }

    #[test]
    fn a_million_distinct_clients_keep_memory_flat_and_the_heavy_one_on_top() {
        let mut o = Offenders::default();
        let t = 1_800_000_000;
        for i in 0..1_000_000u64 {
            let now = t + i * 600 / 1_000_000;
            o.rejected(key(1_000_000 + i), || format!("c{i}"), now);
            if i % 50 == 0 {
                // One client behind 2 % of the rejections: over the 1 % a
                // summary of 100 is sure to hold.
                o.rejected(key(7), || "heavy".into(), now);
            }
        }
        assert!(o.len() <= PER_BUCKET * BUCKETS, "{}", o.len());
        let top = o.top(3, t + 599);
        assert_eq!(top[0].key, "heavy");
        // Space-Saving: never an undercount.
        assert!(top[0].rejected >= 20_000, "{top:?}");
    }
}
