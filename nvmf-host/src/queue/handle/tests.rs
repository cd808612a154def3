//! Resubmission of a command the connection lost, against a scripted controller on loopback: the first
//! connection takes the command and hangs up, the second answers it.

use std::future::Future;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nvmf_common::nvme::io::Write;
use nvmf_common::nvme::{CompletionQueueEntry, Status, SubmissionQueueEntry};
use nvmf_common::transport::tcp::{CapsuleResponse, Framing, IcResp, Pdu};

use super::recovery::transport_loss;
use super::*;
use crate::queue::DataDirection;
use crate::tcp::{TcpQueue, TcpQueueOptions};

const LEN: usize = 512;

/// Tells the test about each hold, then answers with what the test sends back.
#[derive(Debug)]
struct Scripted {
    held: Mutex<Sender<(u64, HostError)>>,
    answer: Mutex<Receiver<Result<(), HostError>>>,
}

impl Recovery for Scripted {
    fn hold(&self, _qid: u16, epoch: u64, cause: &HostError) -> Result<(), HostError> {
        self.held.lock().unwrap().send((epoch, cause.clone())).unwrap();
        self.answer.lock().unwrap().recv().unwrap()
    }
    fn poll_hold(&self, qid: u16, epoch: u64, cause: &HostError, _: &mut Context<'_>) -> Poll<Result<(), HostError>> {
        Poll::Ready(self.hold(qid, epoch, cause))
    }
    fn link_failed(&self) {}
}

/// Accept one connection, answer ICReq, read one Write capsule with `LEN` bytes in it, then hang up
/// (`answer` false) or complete it successfully. Returns the capsule's SQE and data.
fn controller(listener: &TcpListener, answer: bool) -> JoinHandle<(SubmissionQueueEntry, Vec<u8>)> {
    let listener = listener.try_clone().unwrap();
    std::thread::spawn(move || serve(&listener, answer))
}

/// Accept one connection and answer its ICReq.
fn accept_and_answer_icreq(listener: &TcpListener) -> std::net::TcpStream {
    let (mut s, _) = listener.accept().unwrap();
    let mut icreq = [0u8; 128];
    s.read_exact(&mut icreq).unwrap();
    let icresp = Pdu::IcResp(IcResp { pfv: 0, cpda: 0, dgst: Default::default(), maxh2cdata: 8192 });
    s.write_all(&icresp.to_bytes(&[], &Framing::default()).unwrap()).unwrap();
    s
}

fn serve(listener: &TcpListener, answer: bool) -> (SubmissionQueueEntry, Vec<u8>) {
    let mut s = accept_and_answer_icreq(listener);
    let mut capsule = vec![0u8; 72 + LEN];
    s.read_exact(&mut capsule).unwrap();
    let sqe = SubmissionQueueEntry::parse(&capsule[8..72]).unwrap();
    if answer {
        let cqe = CompletionQueueEntry::new(sqe.cid, Status::SUCCESS);
        s.write_all(&Pdu::CapsuleResponse(CapsuleResponse { cqe }).to_bytes(&[], &Framing::default()).unwrap())
            .unwrap();
    }
    (sqe, capsule[72..].to_vec())
}

fn queue(addr: SocketAddr) -> QueueHandle {
    let opts = TcpQueueOptions { qid: 1, depth: 4, in_capsule_limit: 4096, ..TcpQueueOptions::default() };
    QueueHandle::spawn(TcpQueue::connect(addr, &opts).unwrap()).unwrap()
}

/// The test's side of a [`Scripted`] recovery: holds it was told of, and how it answers them.
type Script = (Receiver<(u64, HostError)>, Sender<Result<(), HostError>>);

/// A queue with a [`Scripted`] recovery, connected to a controller that hangs up after one command.
fn setup() -> (TcpListener, QueueHandle, Script, JoinHandle<(SubmissionQueueEntry, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let first = controller(&listener, false);
    let (held_tx, held) = channel();
    let (answer, answer_rx) = channel();
    let recovery = Arc::new(Scripted { held: Mutex::new(held_tx), answer: Mutex::new(answer_rx) });
    let q = queue(listener.local_addr().unwrap()).recovering(0, recovery);
    (listener, q, (held, answer), first)
}

fn write_request() -> (Request<()>, Vec<u8>) {
    let data: Vec<u8> = (0..LEN).map(|i| u8::try_from(i % 251).unwrap()).collect();
    let sqe = Write { nsid: 1, slba: 77, nlb: 0, ..Write::default() }.to_sqe();
    (Request { sqe, data: data.clone(), direction: DataDirection::HostToController, context: () }, data)
}

#[test]
fn a_command_the_connection_lost_is_resubmitted_on_the_replacement() {
    let (listener, q, (held, answer), first) = setup();
    let (request, data) = write_request();
    let pending = q.submit(request).unwrap();
    let (first, sent) = first.join().unwrap();
    assert_eq!(sent, data);

    let waiter = std::thread::spawn(move || pending.wait(Duration::from_secs(10)));
    let (epoch, cause) = held.recv().unwrap();
    assert_eq!(epoch, 0);
    assert!(transport_loss(&cause), "{cause:?}");
    let second = controller(&listener, true);
    q.replace(queue(listener.local_addr().unwrap()), 1);
    answer.send(Ok(())).unwrap();

    let reply = waiter.join().unwrap().unwrap();
    assert!(reply.result.unwrap().status.is_success());
    assert_eq!(reply.data, data, "the caller's buffer comes back");
    let (again, resent) = second.join().unwrap();
    assert_eq!((again.opcode, again.nsid, again.cdw10), (first.opcode, first.nsid, first.cdw10));
    assert_eq!(resent, data, "the same bytes were sent again");
}

/// Tells the test of each failed link; holds nothing.
#[derive(Debug)]
struct Watcher(Mutex<Sender<()>>);

impl Recovery for Watcher {
    fn hold(&self, _qid: u16, _epoch: u64, cause: &HostError) -> Result<(), HostError> {
        Err(cause.clone())
    }
    fn poll_hold(&self, _: u16, _: u64, cause: &HostError, _: &mut Context<'_>) -> Poll<Result<(), HostError>> {
        Poll::Ready(Err(cause.clone()))
    }
    fn link_failed(&self) {
        self.0.lock().unwrap().send(()).unwrap();
    }
}

/// Accept one connection, answer its ICReq, and hang up when told to.
fn hang_up_after_icresp(listener: &TcpListener) -> (Sender<()>, JoinHandle<()>) {
    let listener = listener.try_clone().unwrap();
    let (go, told) = channel();
    let controller = std::thread::spawn(move || {
        let _connection = accept_and_answer_icreq(&listener);
        told.recv().unwrap();
    });
    (go, controller)
}

/// Counts the wake-ups of a task.
#[derive(Debug, Default)]
struct WakeCount(std::sync::atomic::AtomicUsize);

impl std::task::Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn an_awaiting_task_is_woken_by_its_reply_and_by_a_reply_dropped_unsent() {
    let count = Arc::new(WakeCount::default());
    let waker = std::task::Waker::from(Arc::clone(&count));
    let mut cx = Context::from_waker(&waker);
    let woken = || count.0.load(Ordering::SeqCst);

    let (port, mut pending) = reply_port(3, None);
    assert!(Pin::new(&mut pending).poll(&mut cx).is_pending());
    port.send(Reply {
        context: (),
        result: Err(HostError::Closed { qid: 3 }),
        data: vec![7],
        r2ts: 0,
        in_capsule: false,
    });
    assert_eq!(woken(), 1, "woken once the reply is sent");
    match Pin::new(&mut pending).poll(&mut cx) {
        Poll::Ready(Ok(reply)) => assert_eq!(reply.data, vec![7]),
        other => panic!("expected the reply, got {other:?}"),
    }

    // The I/O thread went away with the request still queued: the reply is dropped, never sent.
    let (port, mut pending) = reply_port(3, None);
    assert!(Pin::new(&mut pending).poll(&mut cx).is_pending());
    drop(port);
    assert_eq!(woken(), 2, "woken when the reply channel closes unsent");
    match Pin::new(&mut pending).poll(&mut cx) {
        Poll::Ready(Err(HostError::ShutDown { qid: 3 })) => {}
        other => panic!("expected ShutDown, got {other:?}"),
    }
}

#[test]
fn an_idle_link_that_fails_tells_its_recovery_once() {
    // No command in flight, so no hold reports it: the I/O thread itself must (the controller's
    // supervisor sleeps until told).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, failed) = channel();
    let recovery: Arc<dyn Recovery> = Arc::new(Watcher(Mutex::new(tx)));
    let (go, first) = hang_up_after_icresp(&listener);
    let q = queue(addr).recovering(0, Arc::clone(&recovery));
    assert!(failed.try_recv().is_err(), "nothing failed yet");
    go.send(()).unwrap();
    first.join().unwrap();
    failed.recv_timeout(Duration::from_secs(10)).expect("the first link's failure was reported");
    assert!(q.failure().is_some());

    // A replacement link is watched as well; the replaced one says nothing more.
    let (go, second) = hang_up_after_icresp(&listener);
    q.replace(queue(addr), 1);
    assert!(failed.try_recv().is_err(), "the first failure was reported once");
    go.send(()).unwrap();
    second.join().unwrap();
    failed.recv_timeout(Duration::from_secs(10)).expect("the replacement's failure was reported");
    assert!(q.failure().is_some());
}

#[test]
fn only_commands_that_can_time_out_keep_the_io_thread_checking() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (go, controller) = hang_up_after_icresp(&listener);
    let opts = TcpQueueOptions { qid: 0, depth: 4, ..TcpQueueOptions::default() };
    let mut q: TcpQueue<()> = TcpQueue::connect(listener.local_addr().unwrap(), &opts).unwrap();
    let command = |sqe| Request { sqe, data: Vec::new(), direction: DataDirection::None, context: () };
    q.submit(command(nvmf_common::nvme::admin::AsyncEventRequest.to_sqe())).unwrap();
    assert_eq!(q.outstanding(), 1);
    assert!(!q.timed_outstanding(), "an Asynchronous Event Request waits as long as it takes");
    q.submit(command(nvmf_common::nvme::admin::KeepAlive.to_sqe())).unwrap();
    assert!(q.timed_outstanding(), "a Keep Alive times out");
    go.send(()).unwrap();
    controller.join().unwrap();
}

/// A [`CompletionSink`] that hands completions to the test and counts wake-ups.
#[derive(Debug)]
pub(super) struct TestSink {
    tx: Mutex<Sender<Completed>>,
    pub(super) wakes: AtomicU64,
}

impl TestSink {
    pub(super) fn new() -> (Arc<TestSink>, Receiver<Completed>) {
        let (tx, rx) = channel();
        (Arc::new(TestSink { tx: Mutex::new(tx), wakes: AtomicU64::new(0) }), rx)
    }
}

impl CompletionSink for TestSink {
    fn push(&self, completed: Completed) {
        self.tx.lock().unwrap().send(completed).unwrap();
    }
    fn wake(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_sink_command_the_connection_lost_is_resubmitted_under_its_tag() {
    let (listener, q, (held, answer), first) = setup();
    let (test_sink, rx) = TestSink::new();
    let sink: Arc<dyn CompletionSink> = test_sink.clone();
    let (request, data) = write_request();
    q.submit_to_sink(request, &sink, 42).unwrap();
    let (first, sent) = first.join().unwrap();
    assert_eq!(sent, data);

    let lost = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(lost.tag(), 42);
    // The I/O thread wakes the owner after pushing (bounded wait, not a timing assertion).
    let deadline = Instant::now() + Duration::from_secs(10);
    while test_sink.wakes.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the owner was never woken");
        std::thread::yield_now();
    }
    let settling = std::thread::spawn(move || lost.settle());
    let (epoch, cause) = held.recv().unwrap();
    assert_eq!(epoch, 0);
    assert!(transport_loss(&cause), "{cause:?}");
    let second = controller(&listener, true);
    q.replace(queue(listener.local_addr().unwrap()), 1);
    answer.send(Ok(())).unwrap();
    assert!(settling.join().unwrap().is_none(), "resubmitted: the reply comes through the sink");

    let done = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(done.tag(), 42, "the same tag");
    let reply = done.settle().expect("answered by the new association");
    assert!(reply.result.unwrap().status.is_success());
    assert_eq!(reply.data, data, "the caller's buffer comes back");
    let (again, resent) = second.join().unwrap();
    assert_eq!((again.opcode, again.nsid, again.cdw10), (first.opcode, first.nsid, first.cdw10));
    assert_eq!(resent, data, "the same bytes were sent again");
}

#[test]
fn a_lost_sink_command_fails_with_the_recovery_error_and_keeps_its_buffer() {
    let (_listener, q, (held, answer), first) = setup();
    let (test_sink, rx) = TestSink::new();
    let sink: Arc<dyn CompletionSink> = test_sink;
    let (request, data) = write_request();
    q.submit_to_sink(request, &sink, 7).unwrap();
    first.join().unwrap();
    answer.send(Err(HostError::FastIoFail { after: Duration::from_millis(5) })).unwrap();
    let lost = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let reply = lost.settle().expect("failed, not resubmitted");
    assert!(matches!(reply.result, Err(HostError::FastIoFail { .. })), "{:?}", reply.result);
    assert_eq!(reply.data, data);
    assert!(held.try_recv().is_ok(), "the loss went through the recovery");
}

#[test]
fn a_lost_command_fails_with_the_recovery_error_and_keeps_its_buffer() {
    let (_listener, q, (held, answer), first) = setup();
    let (request, data) = write_request();
    let pending = q.submit(request).unwrap();
    first.join().unwrap();
    answer.send(Err(HostError::FastIoFail { after: Duration::from_millis(5) })).unwrap();
    let reply = pending.wait(Duration::from_secs(10)).unwrap();
    assert!(matches!(reply.result, Err(HostError::FastIoFail { .. })), "{:?}", reply.result);
    assert_eq!(reply.data, data);
    assert!(held.try_recv().is_ok(), "the loss went through the recovery");
    // A new submission to the failed connection is held too, and fails the same way.
    answer.send(Err(HostError::ControllerLost { after: Duration::from_secs(1) })).unwrap();
    // (It is held in `submit` if the I/O thread already published the failure, else in `wait`.)
    let lost = match q.submit(write_request().0) {
        Err(e) => e,
        Ok(p) => p.wait(Duration::from_secs(10)).unwrap().result.unwrap_err(),
    };
    assert!(matches!(lost, HostError::ControllerLost { .. }), "{lost:?}");
}
