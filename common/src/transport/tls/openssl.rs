//! The OpenSSL side of a TLS 1.3 handshake with an external PSK: a context per handshake (TLS 1.3 only, the two
//! NVMe/TCP suites, no session tickets, no certificate), the PSK handed over as an `SSL_SESSION` from the
//! client's use-session and the server's find-session callbacks (as SPDK does; `openssl-sys` does not bind these
//! TLS 1.3 calls, so they are declared here), and the traffic secrets taken from the key-log callback for kTLS.
//! Every pointer OpenSSL gives or takes stays inside this file.

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ulong, c_void, CStr};
use std::os::fd::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use openssl_sys as ffi;
use zeroize::Zeroizing;

use super::{CipherSuite, HandshakePsk, TlsError};

type UseSessionCallback = unsafe extern "C" fn(
    *mut ffi::SSL,
    *const ffi::EVP_MD,
    *mut *const c_uchar,
    *mut usize,
    *mut *mut ffi::SSL_SESSION,
) -> c_int;
type FindSessionCallback =
    unsafe extern "C" fn(*mut ffi::SSL, *const c_uchar, usize, *mut *mut ffi::SSL_SESSION) -> c_int;
type ClientHelloCallback = unsafe extern "C" fn(*mut ffi::SSL, *mut c_int, *mut c_void) -> c_int;

extern "C" {
    fn SSL_set_fd(ssl: *mut ffi::SSL, fd: c_int) -> c_int;
    fn SSL_SESSION_new() -> *mut ffi::SSL_SESSION;
    fn SSL_SESSION_set1_master_key(session: *mut ffi::SSL_SESSION, key: *const c_uchar, len: usize) -> c_int;
    fn SSL_SESSION_set_cipher(session: *mut ffi::SSL_SESSION, cipher: *const ffi::SSL_CIPHER) -> c_int;
    fn SSL_SESSION_set_protocol_version(session: *mut ffi::SSL_SESSION, version: c_int) -> c_int;
    fn SSL_CIPHER_find(ssl: *mut ffi::SSL, id: *const c_uchar) -> *const ffi::SSL_CIPHER;
    fn SSL_CIPHER_get_protocol_id(cipher: *const ffi::SSL_CIPHER) -> u16;
    fn SSL_CTX_set_psk_use_session_callback(ctx: *mut ffi::SSL_CTX, cb: Option<UseSessionCallback>);
    fn SSL_CTX_set_psk_find_session_callback(ctx: *mut ffi::SSL_CTX, cb: Option<FindSessionCallback>);
    fn ERR_clear_error();
    fn SSL_CTX_set_client_hello_cb(ctx: *mut ffi::SSL_CTX, cb: Option<ClientHelloCallback>, arg: *mut c_void);
    fn SSL_client_hello_get0_ext(ssl: *mut ffi::SSL, ext: c_uint, out: *mut *const c_uchar, len: *mut usize) -> c_int;
    fn SSL_set_ciphersuites(ssl: *mut ffi::SSL, suites: *const c_char) -> c_int;
}

/// The ClientHello's `pre_shared_key` extension (RFC 8446 §4.2.11).
const PRE_SHARED_KEY: c_uint = 41;

/// The longest PSK identity kept for a log line; TLS allows 65535 bytes, the NVMe identities are a few hundred.
const MAX_IDENTITY_KEPT: usize = 1024;

/// Which end of the handshake this is, with what it needs.
pub(super) enum Role<'a> {
    /// Offer this PSK.
    Client(&'a HandshakePsk),
    /// Look up the PSK of the identity the client offers.
    Server(&'a mut dyn FnMut(&[u8]) -> Option<HandshakePsk>),
}

/// What a handshake learned: the identity used, the suite, both directions' application traffic secrets, and the
/// OpenSSL session (for user-space records where the kernel has no kTLS).
pub(super) struct Outcome {
    pub identity: Vec<u8>,
    pub suite: CipherSuite,
    pub client_secret: Zeroizing<Vec<u8>>,
    pub server_secret: Zeroizing<Vec<u8>>,
    pub session: Session,
}

/// A completed TLS session kept in OpenSSL: its records can be read and written in user space ([`Session::relay`]).
pub(super) struct Session {
    ssl: Connection,
    _ctx: Context,
}

// SAFETY: the SSL and its context are owned by this value alone (nothing else holds their pointers once the
// handshake returned), and OpenSSL objects may move between threads as long as one thread uses them at a time.
unsafe impl Send for Session {}

/// The state the callbacks reach through the `SSL`'s application data.
struct Exchange<'a> {
    role: Role<'a>,
    /// The identity the client offered (server) or we offered (client).
    offered: Option<Vec<u8>>,
    /// The identity a session was made for, and its suite.
    chosen: Option<(Vec<u8>, CipherSuite)>,
    client_secret: Option<Zeroizing<Vec<u8>>>,
    server_secret: Option<Zeroizing<Vec<u8>>>,
    /// Server: the suite whose hash the client's first binder has (from its ClientHello).
    binder: Option<CipherSuite>,
}

/// An owned `SSL_CTX`.
struct Context(*mut ffi::SSL_CTX);

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the pointer came from SSL_CTX_new, is not null and is freed once, here.
        unsafe { ffi::SSL_CTX_free(self.0) }
    }
}

/// An owned `SSL`.
struct Connection(*mut ffi::SSL);

impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: the pointer came from SSL_new, is not null and is freed once, here; the socket BIO does not own
        // the descriptor, so this sends and closes nothing.
        unsafe { ffi::SSL_free(self.0) }
    }
}

/// Run the handshake on `fd` (connected, blocking; its timeouts bound every wait).
pub(super) fn handshake(fd: RawFd, role: Role<'_>) -> Result<Outcome, TlsError> {
    ffi::init();
    let client = matches!(role, Role::Client(_));
    let suites = match &role {
        Role::Client(psk) => psk.suite.with_same_hash(),
        // Narrowed to the binder's hash by the ClientHello callback.
        Role::Server(_) => "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256",
    };
    let mut exchange =
        Exchange { role, offered: None, chosen: None, client_secret: None, server_secret: None, binder: None };
    // SAFETY: clears this thread's OpenSSL error queue; no pointers.
    unsafe { ERR_clear_error() };
    let ctx = context(client, suites)?;
    // SAFETY: ctx.0 is a live context; the result is checked for null and owned by the guard.
    let ssl = Connection(non_null(unsafe { ffi::SSL_new(ctx.0) }, "SSL_new")?);
    // SAFETY: `exchange` outlives the SSL (dropped at the end of this function, after `ssl`'s last use, which is
    // the handshake below); the callbacks read it only during SSL_connect/SSL_accept, on this thread.
    let attached = unsafe { ffi::SSL_set_ex_data(ssl.0, 0, ptr::from_mut(&mut exchange).cast::<c_void>()) };
    // SAFETY: ssl.0 is live; SSL_set_fd only records the descriptor in a non-owning socket BIO.
    if attached != 1 || unsafe { SSL_set_fd(ssl.0, fd) } != 1 {
        return Err(TlsError::Handshake(openssl_reason("cannot attach the socket")));
    }
    // SAFETY: ssl.0 is live and set up above; both calls block on the socket, bounded by its timeouts.
    let done = unsafe {
        if client {
            ffi::SSL_connect(ssl.0)
        } else {
            ffi::SSL_accept(ssl.0)
        }
    };
    let result = if done == 1 { outcome(&ssl, &mut exchange) } else { Err(failure(&ssl, done, &exchange, client)) };
    // SAFETY: ssl.0 is live; the exchange is about to go: no callback may reach it later (they find null).
    unsafe { ffi::SSL_set_ex_data(ssl.0, 0, ptr::null_mut()) };
    // SAFETY: as above.
    unsafe { ERR_clear_error() };
    let (identity, suite, client_secret, server_secret) = result?;
    Ok(Outcome { identity, suite, client_secret, server_secret, session: Session { ssl, _ctx: ctx } })
}

/// A context for one handshake.
fn context(client: bool, suites: &str) -> Result<Context, TlsError> {
    // SAFETY: TLS_method returns a static method table; the context is checked for null and owned by the guard.
    let ctx = Context(non_null(unsafe { ffi::SSL_CTX_new(ffi::TLS_method()) }, "SSL_CTX_new")?);
    let suites = std::ffi::CString::new(suites).map_err(|_| TlsError::Handshake("bad suite list".into()))?;
    // SAFETY: ctx.0 is live; the suite string is NUL-terminated and copied by OpenSSL; the callbacks are functions
    // of this file with the signatures OpenSSL declares.
    let ok = unsafe {
        ffi::SSL_CTX_set_min_proto_version(ctx.0, ffi::TLS1_3_VERSION) == 1
            && ffi::SSL_CTX_set_max_proto_version(ctx.0, ffi::TLS1_3_VERSION) == 1
            && ffi::SSL_CTX_set_ciphersuites(ctx.0, suites.as_ptr()) == 1
            // No tickets: a post-handshake record would reach kTLS as a control record the NVMe/TCP peer cannot
            // take, and nobody resumes an NVMe/TCP session.
            && ffi::SSL_CTX_set_num_tickets(ctx.0, 0) == 1
    };
    if !ok {
        return Err(TlsError::Handshake(openssl_reason("cannot set up the context")));
    }
    // SAFETY: as above.
    unsafe {
        ffi::SSL_CTX_set_options(ctx.0, ffi::SSL_OP_NO_TICKET);
        ffi::SSL_CTX_set_keylog_callback(ctx.0, Some(key_log));
        if client {
            SSL_CTX_set_psk_use_session_callback(ctx.0, Some(use_session));
        } else {
            SSL_CTX_set_psk_find_session_callback(ctx.0, Some(find_session));
            SSL_CTX_set_client_hello_cb(ctx.0, Some(client_hello), ptr::null_mut());
        }
    }
    Ok(ctx)
}

fn non_null<T>(p: *mut T, what: &str) -> Result<*mut T, TlsError> {
    if p.is_null() {
        Err(TlsError::Handshake(openssl_reason(what)))
    } else {
        Ok(p)
    }
}

/// The identity, suite and traffic secrets of a completed handshake.
type Learned = (Vec<u8>, CipherSuite, Zeroizing<Vec<u8>>, Zeroizing<Vec<u8>>);

/// After a completed handshake: the suite and the secrets kTLS needs.
fn outcome(ssl: &Connection, exchange: &mut Exchange<'_>) -> Result<Learned, TlsError> {
    // SAFETY: ssl.0 is live; the cipher pointer is OpenSSL's static table entry, read at once.
    let id = unsafe {
        let cipher = ffi::SSL_get_current_cipher(ssl.0);
        if cipher.is_null() {
            0
        } else {
            SSL_CIPHER_get_protocol_id(cipher)
        }
    };
    let Some(suite) = CipherSuite::from_id(id) else {
        return Err(TlsError::Handshake(format!("negotiated cipher suite {id:#06x}")));
    };
    let Some((identity, psk_suite)) = exchange.chosen.take() else {
        return Err(TlsError::Handshake("completed without a pre-shared key".into()));
    };
    if psk_suite.hash_len() != suite.hash_len() {
        return Err(TlsError::Handshake(format!(
            "the PSK is for {} but {} was negotiated",
            psk_suite.name(),
            suite.name()
        )));
    }
    match (exchange.client_secret.take(), exchange.server_secret.take()) {
        (Some(client_secret), Some(server_secret)) => Ok((identity, suite, client_secret, server_secret)),
        _ => Err(TlsError::Handshake("OpenSSL did not give the traffic secrets".into())),
    }
}

/// Bytes on their way from one socket to the other.
struct Pending {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Pending {
    fn new() -> Self {
        Pending { buf: vec![0; RELAY_BUFFER].into_boxed_slice(), start: 0, end: 0 }
    }

    fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Whether more can come in ([`Pending::room`] makes the room).
    fn has_room(&self) -> bool {
        self.end - self.start < self.buf.len()
    }

    /// Room at the end (after moving what is left to the front).
    fn room(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
}

/// Each direction's relay buffer: four TLS records.
const RELAY_BUFFER: usize = 64 * 1024;

/// What one step of OpenSSL I/O came to.
enum Step {
    /// This many bytes.
    Moved(usize),
    /// Wait for the socket to be readable (`false`) or writable (`true`).
    Wait(bool),
    /// The peer closed the session.
    Closed,
}

impl Session {
    /// Carry the session's records in user space: decrypt what arrives on `tls` and write it to `plain`, encrypt
    /// what arrives on `plain` and send it on `tls`, until either side closes (then the other is shut down). Both
    /// sockets are made non-blocking; runs on the calling thread.
    pub(super) fn relay(self, tls: &std::net::TcpStream, plain: &std::net::TcpStream) {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        if tls.set_nonblocking(true).is_err() || plain.set_nonblocking(true).is_err() {
            return;
        }
        // SAFETY: self.ssl.0 is live; the new socket BIO does not own `tls`'s descriptor, which outlives the
        // session (both are this function's until it returns). The handshake's descriptor may be closed by now.
        if unsafe { SSL_set_fd(self.ssl.0, tls.as_raw_fd()) } != 1 {
            return;
        }
        // SAFETY: self.ssl.0 is live; partial writes and a moved buffer are allowed from now on.
        unsafe {
            ffi::SSL_ctrl(
                self.ssl.0,
                ffi::SSL_CTRL_MODE,
                ffi::SSL_MODE_ENABLE_PARTIAL_WRITE | ffi::SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER,
                ptr::null_mut(),
            )
        };
        let (mut to_plain, mut to_tls) = (Pending::new(), Pending::new());
        let (mut tls_closed, mut plain_closed) = (false, false);
        let (mut plain_out, mut plain_in) = (plain, plain);
        loop {
            let mut tls_wants_write = false;
            // Whether OpenSSL has read all it holds: a record larger than the room left stays partly in OpenSSL,
            // where no socket readiness will announce it.
            let mut tls_drained = false;
            // Records in, plaintext out.
            while !tls_closed && to_plain.has_room() {
                match self.read_records(to_plain.room()) {
                    Step::Moved(n) => to_plain.end += n,
                    Step::Wait(write) => {
                        tls_wants_write |= write;
                        tls_drained = true;
                        break;
                    }
                    Step::Closed => tls_closed = true,
                }
            }
            while !to_plain.is_empty() {
                match plain_out.write(to_plain.data()) {
                    Ok(0) => return,
                    Ok(n) => to_plain.start += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
            // Plaintext in, records out.
            while !plain_closed && to_tls.has_room() {
                match plain_in.read(to_tls.room()) {
                    Ok(0) => plain_closed = true,
                    Ok(n) => to_tls.end += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
            while !to_tls.is_empty() {
                match self.write_records(to_tls.data()) {
                    Step::Moved(n) => to_tls.start += n,
                    Step::Wait(write) => {
                        tls_wants_write |= write;
                        break;
                    }
                    Step::Closed => return,
                }
            }
            if (tls_closed && to_plain.is_empty()) || (plain_closed && to_tls.is_empty()) {
                // One side is done and all it sent went through: the other learns by its socket closing.
                let _ = plain.shutdown(std::net::Shutdown::Both);
                let _ = tls.shutdown(std::net::Shutdown::Both);
                return;
            }
            if !tls_closed && !tls_drained && to_plain.has_room() {
                // Room again after a full buffer: read what OpenSSL still holds before waiting on the socket.
                continue;
            }
            let tls_events = (if !tls_closed && to_plain.has_room() { libc::POLLIN } else { 0 })
                | (if tls_wants_write || !to_tls.is_empty() { libc::POLLOUT } else { 0 });
            let plain_events = (if !plain_closed && to_tls.has_room() { libc::POLLIN } else { 0 })
                | (if to_plain.is_empty() { 0 } else { libc::POLLOUT });
            let mut fds = [
                libc::pollfd { fd: tls.as_raw_fd(), events: tls_events, revents: 0 },
                libc::pollfd { fd: plain.as_raw_fd(), events: plain_events, revents: 0 },
            ];
            // SAFETY: two initialized pollfd entries, valid for the call.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if rc < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return;
            }
        }
    }

    /// One SSL_read into `buf`.
    fn read_records(&self, buf: &mut [u8]) -> Step {
        let len = c_int::try_from(buf.len()).unwrap_or(c_int::MAX);
        // SAFETY: self.ssl.0 is live and used by this thread only; `buf` has room for `len` bytes.
        let n = unsafe { ffi::SSL_read(self.ssl.0, buf.as_mut_ptr().cast::<c_void>(), len) };
        self.step(n)
    }

    /// One SSL_write of `buf` (partial writes allowed).
    fn write_records(&self, buf: &[u8]) -> Step {
        let len = c_int::try_from(buf.len()).unwrap_or(c_int::MAX);
        // SAFETY: self.ssl.0 is live and used by this thread only; `buf` holds `len` bytes.
        let n = unsafe { ffi::SSL_write(self.ssl.0, buf.as_ptr().cast::<c_void>(), len) };
        self.step(n)
    }

    fn step(&self, n: c_int) -> Step {
        if n > 0 {
            return Step::Moved(usize::try_from(n).unwrap_or(0));
        }
        // SAFETY: self.ssl.0 is live; reads its state and this thread's error queue.
        let code = unsafe { ffi::SSL_get_error(self.ssl.0, n) };
        // SAFETY: clears this thread's error queue; no pointers.
        unsafe { ERR_clear_error() };
        match code {
            ffi::SSL_ERROR_WANT_READ => Step::Wait(false),
            ffi::SSL_ERROR_WANT_WRITE => Step::Wait(true),
            _ => Step::Closed,
        }
    }
}

/// Why a handshake that did not complete failed.
fn failure(ssl: &Connection, ret: c_int, exchange: &Exchange<'_>, client: bool) -> TlsError {
    // SAFETY: ssl.0 is live; SSL_get_error reads its state and this thread's error queue.
    let code = unsafe { ffi::SSL_get_error(ssl.0, ret) };
    let os = std::io::Error::last_os_error();
    match code {
        ffi::SSL_ERROR_WANT_READ | ffi::SSL_ERROR_WANT_WRITE => return TlsError::TimedOut,
        ffi::SSL_ERROR_SYSCALL
            if matches!(os.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
        {
            return TlsError::TimedOut
        }
        _ => {}
    }
    if !client && exchange.chosen.is_none() {
        let offered = exchange.offered.as_ref().map(|i| String::from_utf8_lossy(i).into_owned());
        if offered.is_some() || code == ffi::SSL_ERROR_SSL {
            return TlsError::UnknownIdentity(offered);
        }
    }
    match code {
        ffi::SSL_ERROR_SYSCALL if os.raw_os_error().is_some_and(|e| e != 0) => TlsError::Handshake(os.to_string()),
        ffi::SSL_ERROR_SYSCALL | ffi::SSL_ERROR_ZERO_RETURN => {
            TlsError::Handshake("the peer closed the connection".into())
        }
        _ => TlsError::Handshake(openssl_reason("failed")),
    }
}

/// OpenSSL's reasons for the last failure on this thread, or `fallback`.
fn openssl_reason(fallback: &str) -> String {
    let mut reasons = Vec::new();
    loop {
        // SAFETY: pops this thread's error queue; no pointers.
        let e: c_ulong = unsafe { ffi::ERR_get_error() };
        if e == 0 {
            break;
        }
        // SAFETY: returns a pointer to a static NUL-terminated string, or null.
        let reason = unsafe { ffi::ERR_reason_error_string(e) };
        if !reason.is_null() && reasons.len() < 4 {
            // SAFETY: non-null static C string, per OpenSSL's contract.
            reasons.push(unsafe { CStr::from_ptr(reason) }.to_string_lossy().into_owned());
        }
    }
    if reasons.is_empty() {
        fallback.to_owned()
    } else {
        reasons.join(": ")
    }
}

/// The exchange attached to `ssl`.
///
/// # Safety
/// `ssl` must be the live `SSL` of [`handshake`], inside one of its callbacks (the exchange is then alive and
/// nobody else holds a reference to it).
unsafe fn exchange<'a>(ssl: *const ffi::SSL) -> Option<&'a mut Exchange<'a>> {
    // SAFETY: per the function's contract the application data is the exchange set by `handshake`, or null.
    unsafe { ffi::SSL_get_ex_data(ssl, 0).cast::<Exchange<'a>>().as_mut() }
}

/// A new `SSL_SESSION` holding `psk` as a TLS 1.3 resumption-style PSK for `cipher`, or null.
///
/// # Safety
/// `cipher` must be a live cipher of OpenSSL's table.
unsafe fn psk_session(psk: &HandshakePsk, cipher: *const ffi::SSL_CIPHER) -> *mut ffi::SSL_SESSION {
    // SAFETY: a fresh session (checked for null) set up with a key OpenSSL copies; freed on failure.
    unsafe {
        let session = SSL_SESSION_new();
        if session.is_null() {
            return session;
        }
        if SSL_SESSION_set1_master_key(session, psk.key.as_ptr(), psk.key.len()) != 1
            || SSL_SESSION_set_cipher(session, cipher) != 1
            || SSL_SESSION_set_protocol_version(session, ffi::TLS1_3_VERSION) != 1
        {
            ffi::SSL_SESSION_free(session);
            return ptr::null_mut();
        }
        session
    }
}

/// The client offers its PSK (for the digest OpenSSL asks about, if any).
unsafe extern "C" fn use_session(
    ssl: *mut ffi::SSL,
    md: *const ffi::EVP_MD,
    id: *mut *const c_uchar,
    id_len: *mut usize,
    session: *mut *mut ffi::SSL_SESSION,
) -> c_int {
    let offer = AssertUnwindSafe(|| {
        // SAFETY: OpenSSL calls this during SSL_connect of `handshake`'s SSL; the out-pointers are valid.
        unsafe {
            *session = ptr::null_mut();
            *id = ptr::null();
            *id_len = 0;
            let Some(exchange) = exchange(ssl) else { return 0 };
            let Role::Client(psk) = &exchange.role else { return 0 };
            let psk: &HandshakePsk = psk;
            let cipher = SSL_CIPHER_find(ssl, psk.suite.id().as_ptr());
            if cipher.is_null() {
                return 0;
            }
            if !md.is_null() && md != ffi::SSL_CIPHER_get_handshake_digest(cipher) {
                // A HelloRetryRequest chose another hash: nothing to offer for it.
                return 1;
            }
            let s = psk_session(psk, cipher);
            if s.is_null() {
                return 0;
            }
            *session = s;
            // The identity lives in the caller's HandshakePsk, which outlives the handshake.
            *id = psk.identity.as_ptr();
            *id_len = psk.identity.len();
            exchange.offered = Some(psk.identity.clone());
            exchange.chosen = Some((psk.identity.clone(), psk.suite));
            1
        }
    });
    catch_unwind(offer).unwrap_or(0)
}

/// The server looks up the identity the client offers; no session (and so a failed handshake) when unknown.
unsafe extern "C" fn find_session(
    ssl: *mut ffi::SSL,
    identity: *const c_uchar,
    identity_len: usize,
    session: *mut *mut ffi::SSL_SESSION,
) -> c_int {
    let find = AssertUnwindSafe(|| {
        // SAFETY: OpenSSL calls this during SSL_accept of `handshake`'s SSL with `identity_len` readable bytes at
        // `identity` (or none) and a valid out-pointer.
        unsafe {
            *session = ptr::null_mut();
            let Some(exchange) = exchange(ssl) else { return 0 };
            let offered: &[u8] = if identity.is_null() || identity_len == 0 {
                &[]
            } else {
                std::slice::from_raw_parts(identity, identity_len)
            };
            exchange.offered = Some(offered[..offered.len().min(MAX_IDENTITY_KEPT)].to_vec());
            let binder = exchange.binder;
            let Role::Server(lookup) = &mut exchange.role else { return 0 };
            let Some(mut psk) = lookup(offered) else { return 1 };
            if !matches!(psk.key.len(), 32 | 48) {
                return 0;
            }
            // The session's hash must be the binder's (GnuTLS sends SHA-256 binders for SHA-384 keys).
            psk.suite = binder.unwrap_or(psk.suite);
            let cipher = SSL_CIPHER_find(ssl, psk.suite.id().as_ptr());
            if cipher.is_null() {
                return 0;
            }
            let s = psk_session(&psk, cipher);
            if s.is_null() {
                return 0;
            }
            *session = s;
            exchange.chosen = Some((offered.to_vec(), psk.suite));
            1
        }
    });
    catch_unwind(find).unwrap_or(0)
}

/// The server reads the hash of the client's first PSK binder (its length: 32 bytes SHA-256, 48 SHA-384) and takes
/// only suites of that hash, so that the PSK found for the identity verifies whichever convention the client has.
unsafe extern "C" fn client_hello(ssl: *mut ffi::SSL, _alert: *mut c_int, _arg: *mut c_void) -> c_int {
    const SUCCESS: c_int = 1;
    let read = AssertUnwindSafe(|| {
        let mut data: *const c_uchar = ptr::null();
        let mut len = 0usize;
        // SAFETY: OpenSSL calls this during SSL_accept of `handshake`'s SSL; on success `data` points to `len`
        // bytes of the extension, valid during the callback.
        let ext = unsafe {
            if SSL_client_hello_get0_ext(ssl, PRE_SHARED_KEY, &mut data, &mut len) != 1 || data.is_null() {
                return SUCCESS;
            }
            std::slice::from_raw_parts(data, len)
        };
        let Some(binder) = first_binder_len(ext).and_then(|n| match n {
            32 => Some(CipherSuite::Aes128GcmSha256),
            48 => Some(CipherSuite::Aes256GcmSha384),
            _ => None,
        }) else {
            return SUCCESS;
        };
        let Ok(suites) = std::ffi::CString::new(binder.with_same_hash()) else { return SUCCESS };
        // SAFETY: as above; the exchange is `handshake`'s; the suite string is NUL-terminated and copied.
        unsafe {
            if let Some(exchange) = exchange(ssl) {
                exchange.binder = Some(binder);
            }
            SSL_set_ciphersuites(ssl, suites.as_ptr());
        }
        SUCCESS
    });
    catch_unwind(read).unwrap_or(0)
}

/// The length of the first binder of a `pre_shared_key` extension: `identities<7..2^16-1>` (each an identity
/// `<1..2^16-1>` and a 4-byte ticket age), then `binders<33..2^16-1>` (each `<32..255>`). `None` when malformed.
fn first_binder_len(ext: &[u8]) -> Option<usize> {
    let identities = usize::from(u16::from_be_bytes([*ext.first()?, *ext.get(1)?]));
    let binders = ext.get(2 + identities..)?;
    binders.get(2).map(|&n| usize::from(n))
}

/// Keeps the two application traffic secrets (`CLIENT_TRAFFIC_SECRET_0`, `SERVER_TRAFFIC_SECRET_0`) of the
/// NSS key-log lines OpenSSL produces; nothing is written anywhere.
unsafe extern "C" fn key_log(ssl: *const ffi::SSL, line: *const c_char) {
    let keep = AssertUnwindSafe(|| {
        if line.is_null() {
            return;
        }
        // SAFETY: OpenSSL passes a NUL-terminated line, valid during the call, for `handshake`'s SSL.
        let (exchange, line) = unsafe { (exchange(ssl), CStr::from_ptr(line).to_bytes()) };
        let Some(exchange) = exchange else { return };
        let mut fields = line.split(|&b| b == b' ');
        let (Some(label), Some(_random), Some(hex)) = (fields.next(), fields.next(), fields.next()) else { return };
        let slot = match label {
            b"CLIENT_TRAFFIC_SECRET_0" => &mut exchange.client_secret,
            b"SERVER_TRAFFIC_SECRET_0" => &mut exchange.server_secret,
            _ => return,
        };
        *slot = decode_hex(hex);
    });
    let _ = catch_unwind(keep);
}

fn decode_hex(hex: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    if hex.len() % 2 != 0 || hex.len() > 128 {
        return None;
    }
    let nibble = |c: u8| char::from(c).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let mut out = Zeroizing::new(Vec::with_capacity(hex.len() / 2));
    for pair in hex.chunks_exact(2) {
        out.push(nibble(pair[0])? << 4 | nibble(pair[1])?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::first_binder_len;

    /// A `pre_shared_key` extension with one identity of `id_len` bytes and one binder of `binder_len`.
    fn extension(id_len: usize, binder_len: u8) -> Vec<u8> {
        let identities = 2 + id_len + 4;
        let mut ext = u16::try_from(identities).unwrap().to_be_bytes().to_vec();
        ext.extend_from_slice(&u16::try_from(id_len).unwrap().to_be_bytes());
        ext.extend(std::iter::repeat_n(b'x', id_len));
        ext.extend_from_slice(&[0; 4]);
        ext.extend_from_slice(&(u16::from(binder_len) + 1).to_be_bytes());
        ext.push(binder_len);
        ext.extend(std::iter::repeat_n(7, usize::from(binder_len)));
        ext
    }

    #[test]
    fn the_first_binder_length_is_read_and_garbage_is_none() {
        assert_eq!(first_binder_len(&extension(100, 32)), Some(32));
        assert_eq!(first_binder_len(&extension(500, 48)), Some(48));
        for cut in 0..10 {
            let ext = extension(3, 32);
            assert_eq!(first_binder_len(&ext[..cut]), None, "cut at {cut}");
        }
        assert_eq!(first_binder_len(&[0xff, 0xff, 1, 2, 3]), None);
        assert_eq!(first_binder_len(&[]), None);
    }
}
