//! Choosing a target: `round_robin` (smooth weighted), `least_requests`,
//! `random` (weighted) and `hash` (weighted rendezvous hashing on the client
//! key, so a client sticks to its target and only the clients of a removed
//! target move).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::config::Balance;

/// The balancing state of one upstream pool.
#[derive(Debug)]
pub struct Balancer {
    policy: Balance,
    weights: Vec<u32>,
    /// The smooth weighted round-robin order over one cycle of the weights.
    schedule: Vec<usize>,
    next: AtomicUsize,
}

impl Balancer {
    /// A balancer over targets with these weights (each >= 1).
    pub fn new(policy: Balance, weights: Vec<u32>) -> Self {
        let schedule = smooth_schedule(&weights);
        Balancer {
            policy,
            weights,
            schedule,
            next: AtomicUsize::new(0),
        }
    }

    /// Pick a target index among those `usable` says yes to. `in_flight`
    /// gives each target's current requests (for `least_requests`); `key` is
    /// the client key's hash (for `hash`). `None` when no target is usable.
    pub fn pick(
        &self,
        key: u64,
        usable: impl Fn(usize) -> bool,
        in_flight: impl Fn(usize) -> usize,
    ) -> Option<usize> {
        let n = self.weights.len();
        match self.policy {
            Balance::RoundRobin => {
                let len = self.schedule.len();
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                (0..len)
                    .map(|i| self.schedule[(start + i) % len])
                    .find(|&t| usable(t))
            }
            Balance::LeastRequests => {
                // Lowest in-flight per unit of weight; ties rotate so equal
                // targets share the load.
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                let mut best: Option<(usize, u64)> = None;
                for i in 0..n {
                    let t = (start + i) % n;
                    if !usable(t) {
                        continue;
                    }
                    // Compare in_flight/weight without division.
                    let load = (in_flight(t) as u64 + 1) * 1_000_000 / u64::from(self.weights[t]);
                    if best.is_none_or(|(_, b)| load < b) {
                        best = Some((t, load));
                    }
                }
                best.map(|(t, _)| t)
            }
            Balance::Random => {
                let total: u64 = (0..n)
                    .filter(|&t| usable(t))
                    .map(|t| u64::from(self.weights[t]))
                    .sum();
                if total == 0 {
                    return None;
                }
                let mut roll = fastrand::u64(0..total);
                (0..n).filter(|&t| usable(t)).find(|&t| {
                    let w = u64::from(self.weights[t]);
                    if roll < w {
                        true
                    } else {
                        roll -= w;
                        false
                    }
                })
            }
            Balance::Hash => (0..n)
                .filter(|&t| usable(t))
                .map(|t| (t, rendezvous_score(key, t as u64, self.weights[t])))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(t, _)| t),
        }
    }
}

/// Nginx's smooth weighted round robin, unrolled over one cycle: weights
/// 2:1 give `a b a`, never `a a b`. The cycle is sum(weights / gcd) long.
fn smooth_schedule(weights: &[u32]) -> Vec<usize> {
    let g = weights.iter().copied().fold(0u32, gcd).max(1);
    let weights: Vec<i64> = weights.iter().map(|&w| i64::from(w / g)).collect();
    let total: i64 = weights.iter().sum();
    // Cap the table; beyond this, the order is still proportional within a cycle.
    let len = total.clamp(1, 10_000);
    let mut current = vec![0i64; weights.len()];
    let mut schedule = Vec::with_capacity(len as usize);
    for _ in 0..len {
        let mut best = 0;
        for (i, w) in weights.iter().enumerate() {
            current[i] += w;
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        schedule.push(best);
    }
    schedule
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Weighted rendezvous score: `-w / ln(h)` with `h` uniform in (0, 1).
fn rendezvous_score(key: u64, target: u64, weight: u32) -> f64 {
    let h = splitmix64(key ^ splitmix64(target.wrapping_add(0x9E37_79B9_7F4A_7C15)));
    let unit = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -f64::from(weight) / unit.ln()
}

/// A fast, well-mixed 64-bit hash step.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(b: &Balancer, n: usize, picks: usize, key: impl Fn(usize) -> u64) -> Vec<usize> {
        let mut c = vec![0; n];
        for i in 0..picks {
            c[b.pick(key(i), |_| true, |_| 0).unwrap()] += 1;
        }
        c
    }

    #[test]
    fn round_robin_follows_weights_exactly_and_smoothly() {
        let b = Balancer::new(Balance::RoundRobin, vec![2, 1]);
        assert_eq!(counts(&b, 2, 300, |_| 0), vec![200, 100]);
        let b = Balancer::new(Balance::RoundRobin, vec![2, 1]);
        let order: Vec<_> = (0..3)
            .map(|_| b.pick(0, |_| true, |_| 0).unwrap())
            .collect();
        assert_eq!(order, vec![0, 1, 0]);
        assert_eq!(smooth_schedule(&[4, 2]), vec![0, 1, 0]);
    }

    #[test]
    fn round_robin_skips_unusable_targets() {
        let b = Balancer::new(Balance::RoundRobin, vec![1, 1, 1]);
        for _ in 0..10 {
            assert_ne!(b.pick(0, |t| t != 1, |_| 0), Some(1));
        }
        assert_eq!(b.pick(0, |_| false, |_| 0), None);
    }

    #[test]
    fn least_requests_prefers_the_idle_target() {
        let b = Balancer::new(Balance::LeastRequests, vec![1, 1, 1]);
        let load = [5, 0, 3];
        for _ in 0..10 {
            assert_eq!(b.pick(0, |_| true, |t| load[t]), Some(1));
        }
    }

    #[test]
    fn random_spreads_by_weight() {
        let b = Balancer::new(Balance::Random, vec![3, 1]);
        let c = counts(&b, 2, 4000, |_| 0);
        assert!(c[0] > 2700 && c[0] < 3300, "{c:?}");
    }

    #[test]
    fn hash_is_stable_per_key_and_spreads_keys() {
        let b = Balancer::new(Balance::Hash, vec![1, 1, 1]);
        for key in 0..100u64 {
            let first = b.pick(key, |_| true, |_| 0);
            assert_eq!(b.pick(key, |_| true, |_| 0), first);
        }
        let c = counts(&b, 3, 3000, |i| splitmix64(i as u64));
        assert!(c.iter().all(|&x| x > 800), "{c:?}");
        // Removing a target moves only its own keys.
        for key in 0..200u64 {
            let before = b.pick(key, |_| true, |_| 0).unwrap();
            let after = b.pick(key, |t| t != 2, |_| 0).unwrap();
            if before != 2 {
                assert_eq!(before, after);
            }
        }
    }
}
