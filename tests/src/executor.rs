//! A minimal executor for tests of async APIs: [`block_on`] polls a future again only when its waker fires (so a
//! missing wake-up fails the test instead of passing unnoticed), [`join_all`] awaits several futures at once.

use std::time::Duration;

/// Run `future` to completion on this thread, polling it again only when its waker fires: panics when it is
/// not woken within `within` of a poll (a missing wake-up would otherwise go unnoticed).
pub fn block_on<F: std::future::Future>(future: F, within: Duration) -> F::Output {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    use std::thread::Thread;

    struct Unpark {
        thread: Thread,
        woken: AtomicBool,
    }
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.woken.store(true, Ordering::SeqCst);
            self.thread.unpark();
        }
    }
    let unpark = Arc::new(Unpark { thread: std::thread::current(), woken: AtomicBool::new(false) });
    let waker = Waker::from(Arc::clone(&unpark));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        let deadline = std::time::Instant::now() + within;
        while !unpark.woken.swap(false, Ordering::SeqCst) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(!left.is_zero(), "the future was not woken within {within:?}");
            std::thread::park_timeout(left);
        }
    }
}

/// Await every future at once (each polled when any wakes the task), their outputs in order.
pub async fn join_all<F: std::future::Future + Unpin>(futures: Vec<F>) -> Vec<F::Output> {
    let mut slots: Vec<(F, Option<F::Output>)> = futures.into_iter().map(|f| (f, None)).collect();
    std::future::poll_fn(move |cx| {
        let mut all = true;
        for (f, out) in &mut slots {
            if out.is_none() {
                match std::pin::Pin::new(f).poll(cx) {
                    std::task::Poll::Ready(o) => *out = Some(o),
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if !all {
            return std::task::Poll::Pending;
        }
        std::task::Poll::Ready(slots.iter_mut().filter_map(|(_, o)| o.take()).collect())
    })
    .await
}
