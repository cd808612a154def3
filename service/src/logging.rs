//! Log setup for a daemon: `tracing` to stderr, filtered by `RUST_LOG` when set, else by `[logging] level`, as
//! human-readable lines or one JSON object per line (`[logging] format`).
//!
//! Under systemd with stderr connected to the journal (`$JOURNAL_STREAM` names stderr's device and inode), text
//! lines carry the journal's priority prefix (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug and trace) and
//! no timestamp of their own: the journal stamps each line and files it by priority (`journalctl -p warning`).

use std::fmt;
use std::os::fd::AsFd;

use nvmf_config::target::{LogFormat, LoggingConfig};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Install the global subscriber.
pub fn init(config: &LoggingConfig) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let journal = std::env::var("JOURNAL_STREAM").is_ok_and(|v| stderr_is(&v));
    let _ = match config.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text if journal => builder.with_ansi(false).event_format(JournalFormat).try_init(),
        // Colours only on a terminal: a log file gets plain text.
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init(),
    };
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
