//! [`MetricsServer`]: the `/metrics` and `/healthz` endpoint, a small HTTP/1.1 responder on one control-plane
//! thread (`nvmf-metrics`), serving whatever a `prometheus-client` [`Registry`] holds in the exposition the
//! scraper asks for ([`Format`], [`render`]).
//!
//! Why not hyper: it would bring tokio and an async runtime into a daemon whose data path is mio + io_uring, for
//! two GET routes. This thread waits in `epoll` (mio) on a non-blocking `std::net::TcpListener` and a waker (for
//! shutdown); each accepted connection carries one request (`Connection: close`), read into a fixed 8 KiB buffer
//! and answered within a 5 s deadline, so a slow or hostile client costs at most that and cannot grow memory.
//! Requests are served one at a time; a scrape renders in well under a millisecond for typical targets.
//! Nothing here touches a reactor: the scrape reads counters the reactors publish.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use prometheus_client::registry::Registry;

/// A text exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4 (what `promtool check metrics` parses).
    Prometheus,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// The format a scraper's `Accept` header asks for: OpenMetrics when it names it, else Prometheus text.
    pub fn negotiate(accept: Option<&str>) -> Self {
        match accept {
            Some(a) if a.to_ascii_lowercase().contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Encode everything `registry` holds in `format`.
pub fn render(registry: &Registry, format: Format) -> Result<String, fmt::Error> {
    let mut out = String::with_capacity(16 << 10);
    match format {
        Format::Prometheus => prometheus_client::encoding::prometheus_text::encode(&mut out, registry)?,
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, registry)?,
    }
    Ok(out)
}

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

/// Largest request head accepted (request line and headers).
pub const MAX_REQUEST: usize = 8 << 10;

/// Time a client has to send its request and take the response.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The listen address could not be bound.
    #[error("metrics endpoint {addr}: {source}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// epoll, the waker or the thread could not be created.
    #[error("metrics endpoint: {what}: {source}")]
    Os {
        /// What failed.
        what: &'static str,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// The running `/metrics` endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listen on `addr` and serve what `registry` holds.
    pub fn start(addr: SocketAddr, registry: Registry) -> Result<Self, MetricsError> {
        let os = |what| move |source| MetricsError::Os { what, source };
        let listener = TcpListener::bind(addr).map_err(|source| MetricsError::Bind { addr, source })?;
        listener.set_nonblocking(true).map_err(os("listener"))?;
        let local_addr = listener.local_addr().map_err(os("listener"))?;
        let poll = Poll::new().map_err(os("epoll"))?;
        poll.registry()
            .register(&mut SourceFd(&listener.as_raw_fd()), LISTENER, Interest::READABLE)
            .map_err(os("epoll"))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(os("waker"))?);
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("nvmf-metrics".to_owned())
            .spawn(move || run(poll, &listener, &registry, &thread_stop))
            .map_err(os("thread"))?;
        tracing::info!(address = %local_addr, "metrics endpoint listening");
        Ok(MetricsServer { local_addr, stop, waker, thread: Some(thread) })
    }

    /// The address the endpoint is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stop listening and end the thread (a request being served finishes first).
    pub fn stop(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

fn run(mut poll: Poll, listener: &TcpListener, registry: &Registry, stop: &AtomicBool) {
    let mut events = Events::with_capacity(8);
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!(error = %e, "metrics endpoint: epoll failed; endpoint stops");
                return;
            }
        }
        if stop.load(Ordering::Acquire) {
            return;
        }
        // Edge-triggered: accept until the backlog is empty.
        loop {
            match listener.accept() {
                Ok((stream, peer)) => {
                    if let Err(e) = serve(stream, registry) {
                        tracing::debug!(%peer, error = %e, "metrics request failed");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    break;
                }
            }
            if stop.load(Ordering::Acquire) {
                return;
            }
        }
    }
}

/// A parsed request head.
#[derive(Debug, PartialEq, Eq)]
struct Request<'a> {
    method: &'a str,
    path: &'a str,
    accept: Option<&'a str>,
}

/// Parse the request line and the headers we use. `None`: malformed.
fn parse_head(head: &str) -> Option<Request<'_>> {
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let mut parts = lines.next()?.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return None;
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    let mut accept = None;
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        if name.eq_ignore_ascii_case("accept") {
            accept = Some(value.trim());
        }
    }
    Some(Request { method, path, accept })
}

/// End of the request head (index after the blank line), if it is all there.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A response: status line, content type and body.
#[derive(Debug)]
struct Response {
    status: &'static str,
    content_type: &'static str,
    body: String,
    allow: bool,
}

impl Response {
    fn text(status: &'static str, body: &str) -> Self {
        Response { status, content_type: "text/plain; charset=utf-8", body: body.to_owned(), allow: false }
    }
}

/// What to answer `head` (the bytes before the blank line).
fn respond(head: &[u8], registry: &Registry) -> (Response, bool) {
    let Some(request) = std::str::from_utf8(head).ok().and_then(parse_head) else {
        return (Response::text("400 Bad Request", "bad request\n"), false);
    };
    let head_only = request.method == "HEAD";
    let known = matches!(request.path, "/metrics" | "/healthz");
    if !known {
        return (Response::text("404 Not Found", "not found: try /metrics or /healthz\n"), head_only);
    }
    if request.method != "GET" && !head_only {
        let mut r = Response::text("405 Method Not Allowed", "method not allowed\n");
        r.allow = true;
        return (r, false);
    }
    if request.path == "/healthz" {
        return (Response::text("200 OK", "ok\n"), head_only);
    }
    let format = Format::negotiate(request.accept);
    match render(registry, format) {
        Ok(body) => (Response { status: "200 OK", content_type: format.content_type(), body, allow: false }, head_only),
        Err(_) => (Response::text("500 Internal Server Error", "encoding the metrics failed\n"), head_only),
    }
}

/// Serve one request on `stream`.
fn serve(mut stream: TcpStream, registry: &Registry) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let remaining = || {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(io::Error::from(io::ErrorKind::TimedOut))
        } else {
            Ok(left)
        }
    };
    let mut buf = [0u8; MAX_REQUEST];
    let mut len = 0;
    let (response, head_only) = loop {
        if let Some(end) = head_end(&buf[..len]) {
            break respond(&buf[..end], registry);
        }
        if len == buf.len() {
            break (Response::text("431 Request Header Fields Too Large", "request too large\n"), false);
        }
        stream.set_read_timeout(Some(remaining()?))?;
        match stream.read(&mut buf[len..]) {
            Ok(0) => return Ok(()),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    let mut head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        response.status,
        response.content_type,
        response.body.len()
    );
    if response.allow {
        head.push_str("Allow: GET, HEAD\r\n");
    }
    head.push_str("\r\n");
    stream.set_write_timeout(Some(remaining()?))?;
    stream.write_all(head.as_bytes())?;
    if !head_only {
        stream.write_all(response.body.as_bytes())?;
    }
    stream.flush()?;
    stream.shutdown(Shutdown::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_parse() {
        let r = parse_head("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: application/openmetrics-text\r\n").unwrap();
        assert_eq!(r, Request { method: "GET", path: "/metrics", accept: Some("application/openmetrics-text") });
        assert_eq!(parse_head("GET /healthz HTTP/1.0\n").unwrap().path, "/healthz");
        for bad in [
            "",
            "GET",
            "GET /metrics",
            "GET metrics HTTP/1.1",
            "GET /m HTTP/2 x",
            "GET /m FTP/1.0",
            "GET /m HTTP/1.1\r\nbroken",
        ] {
            assert_eq!(parse_head(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn head_ends_at_the_first_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }

    #[test]
    fn routes_and_methods() {
        let registry = Registry::default();
        let (r, head_only) = respond(b"GET /healthz HTTP/1.1\r\n", &registry);
        assert_eq!((r.status, r.body.as_str(), head_only), ("200 OK", "ok\n", false));
        let (r, head_only) = respond(b"HEAD /metrics HTTP/1.1\r\n", &registry);
        assert_eq!((r.status, head_only), ("200 OK", true));
        assert!(r.content_type.starts_with("text/plain; version=0.0.4"));
        let (r, _) =
            respond(b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0\r\n", &registry);
        assert!(r.content_type.starts_with("application/openmetrics-text"));
        assert!(r.body.ends_with("# EOF\n"));
        assert_eq!(respond(b"POST /metrics HTTP/1.1\r\n", &registry).0.status, "405 Method Not Allowed");
        assert!(respond(b"POST /metrics HTTP/1.1\r\n", &registry).0.allow);
        assert_eq!(respond(b"GET /other HTTP/1.1\r\n", &registry).0.status, "404 Not Found");
        assert_eq!(respond(b"\xff\xfe HTTP/1.1\r\n", &registry).0.status, "400 Bad Request");
    }
}
