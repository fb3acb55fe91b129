//! Store calls sent again while the store cannot answer: a settlement
//! ([`Limiter::settle_retrying`](crate::Limiter::settle_retrying)), which
//! is idempotent, so a call whose outcome is unknown (a timeout) may go
//! again. Off any request's path: the caller awaits it in a task of its
//! own.

use std::future::Future;
use std::time::Duration;

use crate::store::redis::StoreError;

/// The wait before the first retry.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two tries.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Whether a store error may heal by itself (the store unreachable, slow,
/// or its breaker open); an error reply will not.
fn transient(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Timeout | StoreError::BreakerOpen | StoreError::Unavailable(_)
    )
}

/// `attempt` until it answers, it fails in a way that will not heal, or
/// the next try would come after `left` (then its last error): after
/// [`FIRST_BACKOFF`], doubling to [`MAX_BACKOFF`]. `attempt` must be safe
/// to repeat.
pub(crate) async fn retrying<T, F, Fut>(left: Duration, mut attempt: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let deadline = tokio::time::Instant::now() + left;
    let mut backoff = FIRST_BACKOFF;
    loop {
        match attempt().await {
            Err(e) if transient(&e) && tokio::time::Instant::now() + backoff < deadline => {
                tracing::debug!(error = %e, "store call not answered; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn retries_while_the_store_cannot_answer_until_the_deadline() {
        let calls = AtomicUsize::new(0);
        // Down for three tries, then applied.
        let outcome = retrying(Duration::from_secs(60), || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 3 {
                    Err(StoreError::Timeout)
                } else {
                    Ok(-4)
                }
            }
        })
        .await;
        assert_eq!(outcome.unwrap(), -4);
        assert_eq!(calls.load(Ordering::SeqCst), 4);

        // Down for good: given up once the next try would be past `left`.
        calls.store(0, Ordering::SeqCst);
        let started = tokio::time::Instant::now();
        let gives_up = retrying(Duration::from_secs(5), || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(StoreError::BreakerOpen) }
        });
        let outcome = tokio::time::timeout(Duration::from_secs(60), gives_up)
            .await
            .expect("given up by the deadline");
        assert!(matches!(outcome, Err(StoreError::BreakerOpen)));
        let waited = started.elapsed();
        assert!(waited <= Duration::from_secs(5), "{waited:?}");
        // Tries at 0, 0.1, 0.3, 0.7, 1.5, 2.5, 3.5 and 4.5 s; the next
        // would be past 5 s.
        assert_eq!(calls.load(Ordering::SeqCst), 8);
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_reply_is_not_retried() {
        let calls = AtomicUsize::new(0);
        let reply = crate::store::redis::wire::ReplyError("garbled".into());
        let outcome = retrying(Duration::from_secs(60), || {
            calls.fetch_add(1, Ordering::SeqCst);
            let e = StoreError::Reply(reply.clone());
            async move { Err::<(), _>(e) }
        })
        .await;
        assert!(matches!(outcome, Err(StoreError::Reply(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
