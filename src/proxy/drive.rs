//! An HTTP/1.1 upstream connection driven by the task of the request using
//! it, instead of a task of its own.
//!
//! hyper's client connection is a future that must be polled for anything to
//! happen on it. Spawned as a task, every exchange crosses tasks: the request
//! goes to the connection's task through a channel, which wakes it; the
//! response comes back through another, which wakes the request's task; two
//! more task polls and wake-ups a request. Here whichever request holds the
//! connection polls it from its own task, beside what it waits for (the
//! response, then each frame of the response body): [`Driven::poll_with`].
//!
//! **Wakes.** The connection wakes the context it was polled with when its
//! socket becomes ready and when one of its channels moves, and most of those
//! wakes come from the same poll (the connection resolving the response it
//! was asked for). [`Driven`] polls with a waker of its own: during a poll, a
//! wake only asks for one more round; outside one, it wakes the task that
//! polled last. A connection idle in the pool has no task to wake
//! ([`Driven::park`]): an upstream closing it is found by the pool's reaper
//! ([`Driven::poll_parked`]), or by the next request, whose message hyper
//! then hands back unsent (the client sends it again on another
//! connection).
//!
//! **Detached.** What the request's task cannot finish goes to a task of its
//! own ([`Driven::detach`]): the connection after a `101 Switching
//! Protocols` (hyper hands the upgraded stream over when the connection's
//! future ends) and one still busy when its response has ended (a request
//! body still being sent after an early response).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Rounds of one [`Driven::poll_with`] before it yields to other tasks (and
/// to Tokio's cooperative budget, which a connection polled in a loop would
/// otherwise never give back).
const ROUNDS: usize = 8;

/// A connection's future, boxed once per connection: hyper's upgradeable
/// connection type cannot be named.
type Connection = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

/// An upstream connection's future, polled by the task that uses it.
pub struct Driven {
    /// `None` once it has ended (closed, failed, or upgraded).
    conn: Option<Connection>,
    state: Arc<State>,
    /// `state` as a waker, made once.
    waker: Waker,
}

/// What the connection's waker does.
struct State {
    /// The task that polled last, woken by wakes outside a poll.
    task: AtomicWaker,
    /// A poll is under way.
    polling: AtomicBool,
    /// Woken during the poll under way: poll once more.
    woken: AtomicBool,
}

impl Wake for State {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.woken.store(true, Ordering::SeqCst);
            // Still polling: the poller will see `woken` once it stops
            // (it clears `polling` before it reads `woken`).
            if self.polling.load(Ordering::SeqCst) {
                return;
            }
        }
        self.task.wake();
    }
}

impl Driven {
    /// Drive `conn` (a client connection's future) from the tasks that use it.
    pub fn new(conn: impl Future<Output = hyper::Result<()>> + Send + 'static) -> Driven {
        let state = Arc::new(State {
            task: AtomicWaker::new(),
            polling: AtomicBool::new(false),
            woken: AtomicBool::new(false),
        });
        Driven {
            conn: Some(Box::pin(conn)),
            waker: Waker::from(state.clone()),
            state,
        }
    }

    /// Whether the connection has ended: closed by either side, or failed.
    pub fn has_ended(&self) -> bool {
        self.conn.is_none()
    }

    /// Poll the connection and then `f` (what the caller waits for: the
    /// response, a body frame) from the task of `cx`, round after round
    /// while either wakes the other, until `f` is ready or neither can make
    /// progress. An ended connection is dropped, which resolves everything
    /// that waited on it (with an error when it was unfinished).
    pub fn poll_with<R>(
        &mut self,
        cx: &mut Context<'_>,
        mut f: impl FnMut(&mut Context<'_>) -> Poll<R>,
    ) -> Poll<R> {
        let Driven { conn, state, waker } = self;
        state.task.register(cx.waker());
        state.woken.store(false, Ordering::Relaxed);
        let mut inner = Context::from_waker(waker);
        for _ in 0..ROUNDS {
            // Relaxed: a wake that misses it wakes the task, one poll more.
            state.polling.store(true, Ordering::Relaxed);
            // Written out, not shared with `poll_parked` through a helper:
            // that cost ~120 instructions a request (callgrind).
            if let Some(c) = conn {
                if let Poll::Ready(ended) = c.as_mut().poll(&mut inner) {
                    if let Err(error) = ended {
                        tracing::debug!(%error, "upstream connection ended with an error");
                    }
                    *conn = None;
                }
            }
            let polled = f(&mut inner);
            state.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() {
                return polled;
            }
            if !state.woken.swap(false, Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        // Still busy: let other tasks run, and come back.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// The connection goes idle: no task is to be woken for it.
    pub fn park(&self) {
        drop(self.state.task.take());
    }

    /// Poll a parked connection once, with no task to wake, so that it
    /// takes in what happened while idle (an upstream closing it); whether it
    /// is still open. Costs no system call when nothing happened.
    pub fn poll_parked(&mut self) -> bool {
        let Driven { conn, waker, .. } = self;
        if let Some(c) = conn {
            if let Poll::Ready(ended) = c.as_mut().poll(&mut Context::from_waker(waker)) {
                if let Err(error) = ended {
                    tracing::debug!(%error, "idle upstream connection ended with an error");
                }
                *conn = None;
            }
        }
        conn.is_some()
    }

    /// Hand the connection to a task of its own, which polls it until it
    /// ends, keeping `keep` (its request sender, say) alive until then.
    /// Outside a Tokio runtime it is dropped instead, which closes it.
    pub fn detach<K: Send + 'static>(self, keep: K) {
        let (Some(conn), Ok(runtime)) = (self.conn, tokio::runtime::Handle::try_current()) else {
            return;
        };
        runtime.spawn(async move {
            let _keep = keep;
            if let Err(error) = conn.await {
                tracing::debug!(%error, "upstream connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A waker counting its wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A future that wakes its waker `n` times from inside its own polls,
    /// then is ready; and what it last registered.
    struct SelfWaking {
        left: usize,
        last: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for SelfWaking {
        type Output = hyper::Result<()>;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<hyper::Result<()>> {
            *self.last.lock().unwrap() = Some(cx.waker().clone());
            if self.left == 0 {
                return Poll::Ready(Ok(()));
            }
            self.left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// A task counting its wakes, and a connection waking itself `left`
    /// times, with what it registered last.
    fn setup(
        left: usize,
    ) -> (
        Arc<Count>,
        Waker,
        Driven,
        Arc<std::sync::Mutex<Option<Waker>>>,
    ) {
        let task = Arc::new(Count(AtomicUsize::new(0)));
        let task_waker = Waker::from(task.clone());
        let last = Arc::new(std::sync::Mutex::new(None));
        let driven = Driven::new(SelfWaking {
            left,
            last: last.clone(),
        });
        (task, task_waker, driven, last)
    }

    #[test]
    fn wakes_during_a_poll_are_rounds_not_task_wakes() {
        let (task, task_waker, mut driven, _) = setup(3);
        let mut cx = Context::from_waker(&task_waker);
        // The connection wakes itself three times: four rounds in one poll
        // (`f` is ready on the fourth), the connection ended on that round.
        let mut rounds = 0;
        let polled = driven.poll_with(&mut cx, |_| {
            rounds += 1;
            if rounds == 4 {
                Poll::Ready(rounds)
            } else {
                Poll::Pending
            }
        });
        assert_eq!(polled, Poll::Ready(4));
        assert!(driven.has_ended());
        assert_eq!(task.0.load(Ordering::SeqCst), 0, "no wake reached the task");
    }

    #[test]
    fn a_wake_outside_a_poll_wakes_the_task_that_polled_last_and_none_once_parked() {
        let (task, task_waker, mut driven, last) = setup(usize::MAX);
        let mut cx = Context::from_waker(&task_waker);
        let polled = driven.poll_with(&mut cx, |_| Poll::<()>::Pending);
        // It never stops waking itself: after ROUNDS rounds the task is
        // woken once, to come back after others had their turn.
        assert_eq!(polled, Poll::Pending);
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        let registered = last.lock().unwrap().clone().expect("polled");
        registered.wake_by_ref();
        assert_eq!(
            task.0.load(Ordering::SeqCst),
            2,
            "woken from outside a poll"
        );
        // Polled again (registered again, woken once more for its rounds),
        // then parked: a wake reaches nobody.
        let _ = driven.poll_with(&mut cx, |_| Poll::<()>::Pending);
        assert_eq!(task.0.load(Ordering::SeqCst), 3);
        driven.park();
        registered.wake_by_ref();
        assert_eq!(task.0.load(Ordering::SeqCst), 3, "parked: nobody to wake");
    }
}
