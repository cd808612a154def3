//! Log setup for a daemon: `tracing` to stderr, filtered by `RUST_LOG` when set, else by `[logging] level`, as
//! human-readable lines or one JSON object per line (`[logging] format`). The filter can be replaced while the
//! daemon runs ([`set_log_filter`], the control socket's `log_level`).
//!
//! Under systemd with stderr connected to the journal (`$JOURNAL_STREAM` names stderr's device and inode), text
//! lines carry the journal's priority prefix (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug and trace) and
//! no timestamp of their own: the journal stamps each line and files it by priority (`journalctl -p warning`).

use std::fmt;
use std::os::fd::AsFd;
use std::sync::{Mutex, OnceLock};

use nvmf_config::target::{LogFormat, LoggingConfig};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

/// The installed filter: how to replace it, and its spelling now.
struct ActiveFilter {
    handle: reload::Handle<EnvFilter, Registry>,
    spec: Mutex<String>,
}

static ACTIVE: OnceLock<ActiveFilter> = OnceLock::new();

/// A log filter that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum LogFilterError {
    /// Not `RUST_LOG` syntax.
    #[error(
        "log filter {spec:?}: {reason} (expected a level such as debug, or RUST_LOG syntax such as \
             info,nvmf_target=debug)"
    )]
    Invalid {
        /// The filter given.
        spec: String,
        /// What is wrong.
        reason: String,
    },
    /// No subscriber of ours is installed (a library user's process).
    #[error("this process's logging was not set up by nvmf-service; its filter cannot be changed here")]
    NotInstalled,
}

/// Install the global subscriber: `RUST_LOG` when set and valid, else `config.level`; the filter can be replaced
/// later ([`set_log_filter`]).
pub fn init(config: &LoggingConfig) {
    let (spec, filter) = match std::env::var("RUST_LOG").ok().and_then(|s| Some((EnvFilter::try_new(&s).ok()?, s))) {
        Some((filter, spec)) => (spec, filter),
        None => (config.level.clone(), EnvFilter::try_new(&config.level).unwrap_or_else(|_| EnvFilter::new("info"))),
    };
    let (filter, handle) = reload::Layer::new(filter);
    let journal = std::env::var("JOURNAL_STREAM").is_ok_and(|v| stderr_is(&v));
    let output = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let output = match config.format {
        LogFormat::Json => output.json().boxed(),
        LogFormat::Text if journal => output.with_ansi(false).event_format(JournalFormat).boxed(),
        // Colours only on a terminal: a log file gets plain text.
        LogFormat::Text => output.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).boxed(),
    };
    if tracing_subscriber::registry().with(filter).with(output).try_init().is_ok() {
        let _ = ACTIVE.set(ActiveFilter { handle, spec: Mutex::new(spec) });
    }
}

/// The log filter in force (`None` when [`init`] did not install the subscriber).
pub fn log_filter() -> Option<String> {
    ACTIVE.get().map(|a| a.spec.lock().unwrap_or_else(|e| e.into_inner()).clone())
}

/// Replace the log filter of the running process (`nvmf-target log-level debug`); returns the new filter.
pub fn set_log_filter(spec: &str) -> Result<String, LogFilterError> {
    let spec = spec.trim();
    let invalid = |reason: String| LogFilterError::Invalid { spec: spec.to_owned(), reason };
    if spec.is_empty() {
        return Err(invalid("empty".into()));
    }
    // A lone word is a target name to EnvFilter (`verbose` would silence everything else): take only levels.
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    if !spec.contains(['=', ',', ':', '[']) && !LEVELS.contains(&spec.to_ascii_lowercase().as_str()) {
        return Err(invalid(format!("not one of {}", LEVELS.join(", "))));
    }
    let filter = EnvFilter::try_new(spec).map_err(|e| invalid(e.to_string()))?;
    let active = ACTIVE.get().ok_or(LogFilterError::NotInstalled)?;
    active.handle.reload(filter).map_err(|e| invalid(e.to_string()))?;
    *active.spec.lock().unwrap_or_else(|e| e.into_inner()) = spec.to_owned();
    tracing::info!(filter = spec, "log filter changed");
    Ok(spec.to_owned())
}

/// `<3>` when stderr is the journal (see the module docs), else nothing: the prefix of a binary's last error
/// line, which it prints itself.
pub fn error_prefix() -> &'static str {
    if std::env::var("JOURNAL_STREAM").is_ok_and(|v| stderr_is(&v)) {
        "<3>"
    } else {
        ""
    }
}

/// Whether `journal_stream` (`$JOURNAL_STREAM`: "DEVICE:INODE", decimal) names the file stderr is open on.
fn stderr_is(journal_stream: &str) -> bool {
    rustix::fs::fstat(std::io::stderr().as_fd()).is_ok_and(|st| names(journal_stream, st.st_dev, st.st_ino))
}

/// Whether "DEVICE:INODE" names `dev` and `ino`.
fn names(journal_stream: &str, dev: u64, ino: u64) -> bool {
    let parsed = journal_stream.split_once(':').and_then(|(d, i)| Some((d.parse().ok()?, i.parse().ok()?)));
    parsed == Some((dev, ino))
}

/// The journal's priority of a level (syslog's: 3 error, 4 warning, 6 info, 7 debug).
fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// `<PRIORITY>target: message field=value ...`: a text line for the journal (see the module docs).
struct JournalFormat;

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, cx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        write!(writer, "<{}>{}: ", priority(*meta.level()), meta.target())?;
        cx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// The only test that installs the process's global subscriber.
    #[test]
    fn the_filter_changes_while_the_process_runs() {
        assert!(matches!(set_log_filter("debug"), Err(LogFilterError::NotInstalled)), "nothing to change yet");
        init(&LoggingConfig { level: "info".into(), format: LogFormat::Text });
        assert!(log_filter().is_some());
        assert_eq!(set_log_filter("debug").unwrap(), "debug");
        assert!(tracing::enabled!(Level::DEBUG), "debug events are now recorded");
        assert_eq!(set_log_filter(" warn ").unwrap(), "warn");
        assert!(!tracing::enabled!(Level::INFO), "info events no longer are");
        let err = set_log_filter("verbose").unwrap_err().to_string();
        assert!(err.starts_with("log filter \"verbose\": not one of off, error, warn, info, debug, trace"), "{err}");
        assert!(set_log_filter("info,nvmf_target=[").is_err());
        assert_eq!(log_filter().unwrap(), "warn", "a refused filter changes nothing");
        assert_eq!(set_log_filter("info,nvmf_target=trace").unwrap(), "info,nvmf_target=trace");
        assert!(tracing::enabled!(target: "nvmf_target::tcp", Level::TRACE));
        assert!(!tracing::enabled!(target: "other", Level::DEBUG));
    }

    #[test]
    fn journal_stream_names_a_device_and_inode() {
        assert!(names("64769:1234", 64769, 1234));
        assert!(!names("64769:1234", 64769, 1235));
        assert!(!names("64769", 64769, 1234));
        assert!(!names("x:1234", 64769, 1234));
        // The stderr of `cargo test` is no journal stream of device 0, inode 0.
        assert!(!stderr_is("0:0"));
    }

    #[test]
    fn journal_lines_carry_the_priority_and_no_timestamp() {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&out);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(Level::DEBUG)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .with_ansi(false)
            .event_format(JournalFormat)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(cntlid = 3, "keep alive timeout expired");
            tracing::warn!("no control socket");
            tracing::info!(subnqn = "testnqn", "admin queue connected");
            tracing::debug!("queue pair destroyed");
        });
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        let target = module_path!();
        assert_eq!(
            text,
            format!(
                "<3>{target}: keep alive timeout expired cntlid=3\n<4>{target}: no control socket\n\
                 <6>{target}: admin queue connected subnqn=\"testnqn\"\n<7>{target}: queue pair destroyed\n"
            )
        );
    }

    /// A writer into a shared buffer.
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
