//! Coalescing (docs/scaling-out.md): while a decision call to Redis is in flight, the
//! decisions of requests that arrive wait here, and go together as the next
//! call: one `FCALL` carrying several requests' checks, which `dispatch.lua`
//! decides one request after another, each all or nothing, in arrival
//! order. A request that finds no call in flight is sent at once (no added
//! latency when idle).
//!
//! This is the bookkeeping only; [`RedisStore`](super::RedisStore) sends
//! the calls. The rules:
//!
//! - at most [`MAX_REQUESTS`] requests and [`MAX_CHECKS`] checks per call;
//!   a queue that fills a call sends it at once, alongside the one in
//!   flight;
//! - when a call ends, the next batch (if any) goes, else the store is idle;
//! - a waiting request gives up after the store's `timeout` (its caller
//!   applies `on_error`), and one whose caller went away is dropped from its
//!   batch before it is sent.

use std::collections::VecDeque;

use tokio::sync::oneshot;

use super::StoreError;
use crate::{Check, Micros, Outcome};

/// Requests per call at most.
pub(crate) const MAX_REQUESTS: usize = 64;

/// Checks per call at most: the reply is 9 numbers per check, and Lua
/// packs them from its stack (about 8,000 slots).
pub(crate) const MAX_CHECKS: usize = 512;

/// A request's answer: one outcome per check and the call's `now`, or why
/// there is none.
pub(crate) type Answer = Result<(Vec<Outcome>, Micros), StoreError>;

/// A request waiting for the next call.
#[derive(Debug)]
pub(crate) struct Waiting {
    /// Its checks.
    pub checks: Vec<Check>,
    /// The gateway's clock when it arrived.
    pub now: Micros,
    /// Where its answer goes.
    pub tx: oneshot::Sender<Answer>,
}

/// What a request that arrives should do.
#[derive(Debug)]
pub(crate) enum Arrival {
    /// No call was in flight: send alone, now (counted as in flight).
    SendNow,
    /// Wait for the answer; and if the queue just filled a call, send that
    /// batch now (counted as in flight).
    Wait(oneshot::Receiver<Answer>, Option<Vec<Waiting>>),
}

/// The decision calls in flight and the requests waiting for the next one.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    in_flight: usize,
    waiting: VecDeque<Waiting>,
    /// Checks in `waiting`.
    checks: usize,
}

impl Queue {
    /// A request of `checks` arrives at `now`.
    pub(crate) fn arrive(&mut self, checks: &[Check], now: Micros) -> Arrival {
        if self.in_flight == 0 {
            self.in_flight = 1;
            return Arrival::SendNow;
        }
        let (tx, rx) = oneshot::channel();
        self.checks += checks.len();
        self.waiting.push_back(Waiting {
            checks: checks.to_vec(),
            now,
            tx,
        });
        let full = self.waiting.len() >= MAX_REQUESTS || self.checks >= MAX_CHECKS;
        let batch = full.then(|| {
            self.in_flight += 1;
            self.take()
        });
        Arrival::Wait(rx, batch.flatten())
    }

    /// A call ended: the next batch to send (still counted as in flight),
    /// or `None` when nothing waits (one call fewer in flight).
    pub(crate) fn call_ended(&mut self) -> Option<Vec<Waiting>> {
        let batch = self.take();
        if batch.is_none() {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        batch
    }

    /// The oldest waiting requests, as many as one call takes (at least
    /// one), or `None` when none waits.
    fn take(&mut self) -> Option<Vec<Waiting>> {
        if self.waiting.is_empty() {
            return None;
        }
        let mut batch = Vec::new();
        let mut checks = 0;
        while let Some(w) = self.waiting.front() {
            let fits = batch.len() < MAX_REQUESTS && checks + w.checks.len() <= MAX_CHECKS;
            if !batch.is_empty() && !fits {
                break;
            }
            checks += w.checks.len();
            batch.extend(self.waiting.pop_front());
        }
        self.checks -= checks;
        Some(batch)
    }

    #[cfg(test)]
    /// Calls in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }
}

/// Hands each request of `batch` its part of `result` (the outcomes of
/// every request's checks, in order, and the call's `now`), or the error.
pub(crate) fn answer(batch: Vec<Waiting>, result: Answer) {
    match result {
        Ok((outcomes, at)) => {
            let mut outcomes = outcomes.into_iter();
            for w in batch {
                let mine: Vec<Outcome> = outcomes.by_ref().take(w.checks.len()).collect();
                // A caller that gave up no longer listens.
                let _ = w.tx.send(Ok((mine, at)));
            }
        }
        Err(e) => {
            for w in batch {
                let _ = w.tx.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{fixed_window, SECOND};
    use crate::{AlgoParams, Status};

    fn checks(n: usize) -> Vec<Check> {
        let p = AlgoParams::FixedWindow(
            fixed_window::Params::new(1, fixed_window::Window::Fixed(SECOND)).unwrap(),
        );
        (0..n)
            .map(|i| Check {
                name: "t".into(),
                key: [i as u8; 16],
                params: p.clone(),
                cost: 1,
                lockout: None,
                shadow: false,
                lease: 0,
                quota: false,
                leasing: None,
            })
            .collect()
    }

    fn outcome(remaining: u64) -> Outcome {
        Outcome {
            status: Status::Allowed,
            lock_started: false,
            delay: 0,
            limit: 9,
            window: 1,
            remaining,
            reset: 1,
            grows_after: 1,
            retry_after: 0,
            at: 0,
            taken: 0,
        }
    }

    #[test]
    fn a_lone_request_goes_at_once_and_later_ones_wait_for_the_next_call() {
        let mut q = Queue::default();
        assert!(matches!(q.arrive(&checks(1), 1), Arrival::SendNow));
        let mut rxs = Vec::new();
        for now in 2..5 {
            match q.arrive(&checks(2), now) {
                Arrival::Wait(rx, None) => rxs.push(rx),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(q.in_flight(), 1);
        let batch = q.call_ended().expect("three wait");
        assert_eq!(batch.len(), 3);
        assert_eq!(batch.iter().map(|w| w.now).collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(q.in_flight(), 1, "the batch is in flight");
        answer(batch, Ok(((0..6).map(outcome).collect(), 7)));
        for (i, mut rx) in rxs.into_iter().enumerate() {
            let (got, at) = rx.try_recv().unwrap().unwrap();
            assert_eq!(at, 7, "every request learns the call's now");
            let remaining: Vec<u64> = got.iter().map(|o| o.remaining).collect();
            assert_eq!(remaining, [2 * i as u64, 2 * i as u64 + 1], "request {i}");
        }
        assert!(q.call_ended().is_none());
        assert_eq!(q.in_flight(), 0, "idle again");
        assert!(matches!(q.arrive(&checks(1), 9), Arrival::SendNow));
    }

    #[test]
    fn a_full_queue_sends_its_batch_at_once_within_the_bounds() {
        let mut q = Queue::default();
        assert!(matches!(q.arrive(&checks(1), 0), Arrival::SendNow));
        let mut sent = Vec::new();
        for i in 0..MAX_REQUESTS {
            if let Arrival::Wait(_, Some(batch)) = q.arrive(&checks(1), i as u64) {
                sent.push(batch.len());
            }
        }
        assert_eq!(sent, [MAX_REQUESTS], "the 64th fills a call");
        assert_eq!(q.in_flight(), 2);
        // Checks bound a call too: 200 + 200 fit, the third does not.
        let mut q = Queue::default();
        assert!(matches!(q.arrive(&checks(1), 0), Arrival::SendNow));
        for _ in 0..2 {
            assert!(matches!(q.arrive(&checks(200), 0), Arrival::Wait(_, None)));
        }
        let Arrival::Wait(_, Some(batch)) = q.arrive(&checks(200), 0) else {
            panic!("600 checks fill a call")
        };
        assert_eq!(batch.len(), 2, "400 checks go, 200 wait");
        assert_eq!(q.call_ended().map(|b| b.len()), Some(1));
    }

    #[test]
    fn a_failed_call_fails_every_request_of_its_batch() {
        let mut q = Queue::default();
        let _ = q.arrive(&checks(1), 0);
        let rxs: Vec<_> = (0..3)
            .map(|_| match q.arrive(&checks(1), 0) {
                Arrival::Wait(rx, _) => rx,
                other => panic!("{other:?}"),
            })
            .collect();
        answer(q.call_ended().unwrap(), Err(StoreError::Timeout));
        for mut rx in rxs {
            assert!(matches!(rx.try_recv().unwrap(), Err(StoreError::Timeout)));
        }
    }
}
