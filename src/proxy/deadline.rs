//! The upstream timeout, on timers reused from request to request.
//!
//! `tokio::time::timeout` files a new timer in Tokio's timer wheel for each
//! request and takes it out again when the response comes: about 470
//! instructions a request (callgrind). A timer still filed whose deadline
//! moves later costs Tokio one compare-and-swap instead: it is re-filed only
//! when its old deadline comes. So a worker thread keeps the timers its
//! requests are done with, and the next request moves one of them on to its
//! own deadline ([`within`]). A timer left in the pool whose deadline passes
//! wakes the task that used it last once, for nothing; at most [`KEEP`] are
//! kept per thread, as many as requests were once waiting at the same time.
//!
//! A timer belongs to the Tokio runtime that made it, so only a thread that
//! runs one runtime for its whole life keeps them
//! ([`keep_timers_on_this_thread`], for the gateway's workers); elsewhere
//! (tests, tools) each request makes its own.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

/// The most timers a thread keeps for reuse.
pub const KEEP: usize = 4096;

type Timer = Pin<Box<Sleep>>;

thread_local! {
    /// This thread's timers for reuse; `None` where they are not kept.
    static IDLE: RefCell<Option<Vec<Timer>>> = const { RefCell::new(None) };
}

/// Keep the upstream timeout's timers on this thread for reuse from now on.
/// Only for a thread whose one Tokio runtime serves it until it ends (a
/// timer belongs to the runtime that made it).
pub fn keep_timers_on_this_thread() {
    IDLE.with(|idle| *idle.borrow_mut() = Some(Vec::new()));
}

/// A timer until `deadline`: one of this thread's, moved on, or a new one.
fn take(deadline: Instant) -> Timer {
    match IDLE.with(|idle| idle.borrow_mut().as_mut().and_then(Vec::pop)) {
        Some(mut timer) => {
            timer.as_mut().reset(deadline);
            timer
        }
        None => Box::pin(tokio::time::sleep_until(deadline)),
    }
}

/// A timer a request is done with: kept when this thread keeps them.
fn give_back(timer: Timer) {
    IDLE.with(|idle| {
        if let Some(idle) = idle.borrow_mut().as_mut() {
            if idle.len() < KEEP {
                idle.push(timer);
            }
        }
    });
}

pin_project! {
    /// [`within`]'s future.
    pub struct Within<F> {
        #[pin]
        inner: F,
        deadline: Instant,
        // Taken when `inner` first waits.
        timer: Option<Timer>,
    }

    impl<F> PinnedDrop for Within<F> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(timer) = this.project().timer.take() {
                give_back(timer);
            }
        }
    }
}

/// `inner`'s output, or `None` when `deadline` comes first (as
/// `tokio::time::timeout_at`, whose timer is made only if `inner` has to
/// wait).
pub fn within<F: Future>(deadline: Instant, inner: F) -> Within<F> {
    Within {
        inner,
        deadline,
        timer: None,
    }
}

impl<F: Future> Future for Within<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<F::Output>> {
        let this = self.project();
        if let Poll::Ready(output) = this.inner.poll(cx) {
            return Poll::Ready(Some(output));
        }
        let deadline = *this.deadline;
        let timer = this.timer.get_or_insert_with(|| take(deadline));
        timer.as_mut().poll(cx).map(|()| None)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// How many timers this thread keeps.
    fn kept() -> usize {
        IDLE.with(|idle| idle.borrow().as_ref().map_or(0, Vec::len))
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_applies_and_timers_are_reused_only_where_kept() {
        // Not kept here: nothing stays behind.
        let slow = within(
            Instant::now() + Duration::from_secs(1),
            std::future::pending::<()>(),
        );
        assert_eq!(slow.await, None);
        assert_eq!(kept(), 0);

        keep_timers_on_this_thread();
        let fast = within(Instant::now() + Duration::from_secs(1), async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            7
        });
        assert_eq!(fast.await, Some(7));
        assert_eq!(kept(), 1, "its timer is kept");
        // Reused (moved on to the new deadline, which applies), and kept again.
        let started = Instant::now();
        let slow = within(
            started + Duration::from_secs(2),
            std::future::pending::<()>(),
        );
        assert_eq!(kept(), 1, "taken only when the future waits");
        assert_eq!(slow.await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert_eq!(kept(), 1);
        // Ready at once: no timer taken.
        assert_eq!(within(Instant::now(), async { 3 }).await, Some(3));
        assert_eq!(kept(), 1);
        IDLE.with(|idle| *idle.borrow_mut() = None);
    }
}
