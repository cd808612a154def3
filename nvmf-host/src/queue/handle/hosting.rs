//! Hosting a link: a thread with its own event loop (an export queue's io_uring) drives a queue's link itself,
//! between its own work, instead of handing each batch to the link's I/O thread and waiting to be woken back.
//!
//! The host asks ([`QueueHandle::host_here`]); the I/O thread, at its next turn, moves its whole loop
//! ([`IoLoop`]: the queue, the request channel, the backlog) into the host's inbox, wakes the host through a
//! [`CompletionSink`], and blocks until the loop comes back. The host then runs a non-blocking turn of it
//! after its own work ([`LinkHost::turn`]) and, before it sleeps, prepares each link ([`LinkHost::prepare_wait`]: the
//! readiness seen so far consumed, an RDMA completion queue armed, requests whose wake-up that consumed taken)
//! and waits on the queue's poller descriptor as well (a readable epoll descriptor: the socket, the completion
//! channel or the link's waker has news; [`LinkHost::for_each_wait`]), bounded by [`LinkHost::wait_bound`] while
//! commands that can time out are outstanding. Other threads still submit through the channel and the waker,
//! which wakes the host instead.
//!
//! Dropping a hosted link gives it back; its I/O thread carries on where the host left it. A link goes back
//! when it fails or is told to stop (its I/O thread handles both, and the thread that stops it joins that
//! thread), and every link a thread hosts, or was lent and has not taken in yet, goes back ([`release_all`])
//! before that thread blocks anywhere but its own wait: in a recovery's hold, a multipath head's wait for a
//! path, or a full request channel. So a host never holds up a reconnect, a shutdown or another submitter. A
//! link whose queue has no poller descriptor is not lent.
//!
//! State is per thread (a thread-local set of hosted links), so the paths that give links back need no
//! handle on the host.

use std::cell::RefCell;
use std::os::fd::RawFd;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use super::in_flight::InFlight;
use super::io_thread::{IoLoop, Message, Published, TIMEOUT_CHECK};
use super::sink::CompletionSink;
use super::QueueHandle;
use crate::queue::BareQueue;

/// Where an I/O thread sends its loop when asked to lend it, and how it wakes the host.
pub(crate) struct Lender {
    inbox: Sender<Box<dyn HostedLink>>,
    wake: Arc<dyn CompletionSink>,
}

impl std::fmt::Debug for Lender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lender").finish_non_exhaustive()
    }
}

/// A link's loop as its host sees it (the queue's transport erased).
trait HostedLink: Send {
    /// One non-blocking turn; true when the link must go back to its I/O thread.
    fn turn(&mut self) -> bool;
    /// The queue's poller descriptor: readable when the link has something to do.
    fn poll_fd(&self) -> RawFd;
    /// Before the host sleeps: see [`IoLoop::prepare_wait`].
    fn prepare_wait(&mut self) -> bool;
    /// Whether a command that can time out is outstanding (its timeout is checked in `turn`).
    fn timed_outstanding(&self) -> bool;
    fn shared(&self) -> &Arc<Published>;
}

/// A lent loop; dropped, it goes back to its I/O thread.
struct Lent<Q: BareQueue<InFlight>> {
    lp: Option<Box<IoLoop<Q>>>,
    back: SyncSender<Box<IoLoop<Q>>>,
    fd: RawFd,
}

impl<Q: BareQueue<InFlight>> HostedLink for Lent<Q> {
    fn turn(&mut self) -> bool {
        self.lp.as_mut().is_none_or(|lp| lp.hosted_turn())
    }
    fn poll_fd(&self) -> RawFd {
        self.fd
    }
    fn prepare_wait(&mut self) -> bool {
        self.lp.as_mut().is_some_and(|lp| lp.prepare_wait())
    }
    fn timed_outstanding(&self) -> bool {
        self.lp.as_ref().is_some_and(|lp| lp.queue.timed_outstanding())
    }
    fn shared(&self) -> &Arc<Published> {
        // Set from creation until drop.
        &self.lp.as_ref().expect("a lent loop is present until dropped").shared
    }
}

impl<Q: BareQueue<InFlight>> Drop for Lent<Q> {
    fn drop(&mut self) {
        if let Some(lp) = self.lp.take() {
            // The I/O thread waits for it; gone, it has nothing left to serve.
            let _ = self.back.send(lp);
        }
    }
}

/// Lend `lp` to the thread behind `lender` and wait until it comes back (at once when its queue has no poller
/// descriptor or the host has gone). `None` only if the loop was lost (the host leaked it).
pub(super) fn lend<Q: BareQueue<InFlight> + 'static>(lp: Box<IoLoop<Q>>, lender: Lender) -> Option<Box<IoLoop<Q>>> {
    let Some(fd) = lp.queue.poll_fd() else { return Some(lp) };
    let qid = lp.queue.qid();
    let (back, back_rx) = sync_channel(1);
    let lent: Box<dyn HostedLink> = Box::new(Lent { lp: Some(lp), back, fd });
    // Refused (the host is gone): the loop comes straight back as `lent` drops.
    if lender.inbox.send(lent).is_ok() {
        lender.wake.wake();
        tracing::debug!(qid, "link hosted by its caller's thread");
    }
    let lp = back_rx.recv().ok();
    tracing::debug!(qid, "link back on its I/O thread");
    lp
}

struct Hosted {
    id: u64,
    link: Box<dyn HostedLink>,
}

#[derive(Default)]
struct Local {
    /// Where lent links arrive: the thread's [`LinkHost`]'s inbox (here so that [`release_all`] gives back a link
    /// lent and not yet taken in too: its I/O thread waits for it, and takes no more requests until then).
    inbox: Option<Receiver<Box<dyn HostedLink>>>,
    hosted: Vec<Hosted>,
    /// Links asked for and not given back voluntarily (one ask per link; held so a new link never takes a
    /// forgotten one's address).
    asked: Vec<Arc<Published>>,
    next_id: u64,
}

thread_local! {
    static LOCAL: RefCell<Local> = RefCell::default();
}

/// Give back every link this thread hosts or was lent (before it blocks elsewhere than in its own wait); it
/// asks for them again later.
pub(crate) fn release_all() {
    let released = LOCAL.with(|l| {
        let Ok(mut l) = l.try_borrow_mut() else { return Vec::new() };
        let mut released: Vec<Box<dyn HostedLink>> =
            std::mem::take(&mut l.hosted).into_iter().map(|h| h.link).collect();
        released.extend(l.inbox.as_ref().map(|inbox| inbox.try_iter().collect::<Vec<_>>()).unwrap_or_default());
        l.asked.retain(|s| !released.iter().any(|link| Arc::ptr_eq(link.shared(), s)));
        released
    });
    // Dropped outside the borrow: each drop hands a loop back to its thread.
    drop(released);
}

/// Whether this thread hosts the link publishing `shared`.
pub(super) fn hosted_here(shared: &Arc<Published>) -> bool {
    LOCAL.with(|l| l.try_borrow().is_ok_and(|l| l.hosted.iter().any(|h| Arc::ptr_eq(h.link.shared(), shared))))
}

/// A thread's side of hosting (see the module docs): where lent links arrive. One per thread: a new one takes
/// over from the last.
pub struct LinkHost {
    inbox_tx: Sender<Box<dyn HostedLink>>,
    wake: Arc<dyn CompletionSink>,
}

impl std::fmt::Debug for LinkHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkHost").finish_non_exhaustive()
    }
}

impl LinkHost {
    /// A host woken through `wake` when a link arrives (its completion sink: the host waits for it anyway).
    pub fn new(wake: Arc<dyn CompletionSink>) -> Self {
        let (inbox_tx, inbox) = channel();
        // A previous host's links (in its inbox) go back as it drops.
        let previous = LOCAL.with(|l| l.try_borrow_mut().ok().and_then(|mut l| l.inbox.replace(inbox)));
        drop(previous);
        LinkHost { inbox_tx, wake }
    }

    /// Ask for `handle`'s current link unless it was asked for already.
    pub(super) fn ask(&self, handle: &QueueHandle) {
        let link = handle.link();
        let fresh = LOCAL.with(|l| {
            let Ok(mut l) = l.try_borrow_mut() else { return false };
            if l.asked.iter().any(|s| Arc::ptr_eq(s, &link.shared)) {
                return false;
            }
            // Links whose handle and thread are gone.
            l.asked.retain(|s| Arc::strong_count(s) > 1);
            l.asked.push(Arc::clone(&link.shared));
            true
        });
        if fresh {
            let lender = Lender { inbox: self.inbox_tx.clone(), wake: Arc::clone(&self.wake) };
            // Full: the link stays with its I/O thread (asked once).
            if link.submitter.tx.try_send(Message::Lend(lender)).is_ok() {
                let _ = link.submitter.waker.wake();
            }
        }
    }

    /// Take in the links that arrived and run a turn of each, giving back those that must go. Returns how many
    /// this thread hosts.
    pub fn turn(&self) -> usize {
        LOCAL.with(|l| {
            let Ok(mut l) = l.try_borrow_mut() else { return 0 };
            let l = &mut *l;
            for link in l.inbox.iter().flat_map(Receiver::try_iter) {
                let id = l.next_id;
                l.next_id += 1;
                l.hosted.push(Hosted { id, link });
            }
            let mut i = 0;
            while i < l.hosted.len() {
                if l.hosted[i].link.turn() {
                    let gone = l.hosted.swap_remove(i);
                    // Given back failed or stopping: its I/O thread ends it, it is not asked for again.
                    drop(gone);
                } else {
                    i += 1;
                }
            }
            l.hosted.len()
        })
    }

    /// Get every hosted link ready for this thread to sleep on their descriptors (their readiness seen so far
    /// consumed, wake-ups armed); false when one has work first — turn again before sleeping.
    pub fn prepare_wait(&self) -> bool {
        LOCAL.with(|l| {
            let Ok(mut l) = l.try_borrow_mut() else { return true };
            // Every link is prepared, even after one that has work: each consumes its readiness here.
            l.hosted.iter_mut().fold(true, |ready, h| h.link.prepare_wait() & ready)
        })
    }

    /// Each hosted link's identity (never reused on this thread) and poller descriptor: what to wait on too.
    pub fn for_each_wait(&self, mut f: impl FnMut(u64, RawFd)) {
        LOCAL.with(|l| {
            if let Ok(l) = l.try_borrow() {
                for h in &l.hosted {
                    f(h.id, h.link.poll_fd());
                }
            }
        });
    }

    /// How long the host may sleep: 100 ms (how late a command timeout may be seen) while a hosted link has a
    /// command that can time out.
    pub fn wait_bound(&self) -> Option<Duration> {
        LOCAL.with(|l| {
            l.try_borrow()
                .ok()
                .and_then(|l| l.hosted.iter().any(|h| h.link.timed_outstanding()).then_some(TIMEOUT_CHECK))
        })
    }
}

impl Drop for LinkHost {
    fn drop(&mut self) {
        release_all();
        let inbox = LOCAL.with(|l| l.try_borrow_mut().ok().and_then(|mut l| l.inbox.take()));
        // Links lent since go back as the inbox drops.
        drop(inbox);
    }
}
