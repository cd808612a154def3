//! A doctor's [`Report`]: one [`Finding`] per check, printed one line each (`ok|info|warn|fail  check: finding`,
//! with `; fix: …` when not ok) or as JSON, and the exit status it means.

use std::io::{self, Write};

use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// As it should be.
    Ok,
    /// Worth knowing; nothing to do (a check that does not apply, a value that cannot be read).
    Info,
    /// Works, but slower or fragile: the fix says how to do better.
    Warn,
    /// The daemon will fail, or fail under load, as configured.
    Fail,
}

impl Level {
    fn word(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Fail => "fail",
        }
    }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// How it came out.
    pub level: Level,
    /// What was checked (`memlock`, `port rxe0/1`).
    pub check: String,
    /// What was found, in words.
    pub finding: String,
    /// What to do about it (not for `ok`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    /// An `ok` finding.
    pub fn ok(check: impl Into<String>, finding: impl Into<String>) -> Self {
        Finding { level: Level::Ok, check: check.into(), finding: finding.into(), fix: None }
    }

    /// An `info` finding.
    pub fn info(check: impl Into<String>, finding: impl Into<String>) -> Self {
        Finding { level: Level::Info, check: check.into(), finding: finding.into(), fix: None }
    }

    /// A `warn` finding and its fix.
    pub fn warn(check: impl Into<String>, finding: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding { level: Level::Warn, check: check.into(), finding: finding.into(), fix: Some(fix.into()) }
    }

    /// A `fail` finding and its fix.
    pub fn fail(check: impl Into<String>, finding: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding { level: Level::Fail, check: check.into(), finding: finding.into(), fix: Some(fix.into()) }
    }

    /// The same finding at most at `level` (a check of something the configuration does not use).
    pub fn at_most(mut self, level: Level) -> Self {
        self.level = self.level.min(level);
        self
    }
}

/// Every finding of one doctor run, in check order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The daemon checked for (`nvmf-target`).
    pub program: String,
    /// No check failed.
    pub ok: bool,
    /// The findings.
    pub findings: Vec<Finding>,
}

impl Report {
    /// A report of `findings`.
    pub fn new(program: &str, findings: Vec<Finding>) -> Self {
        let ok = findings.iter().all(|f| f.level != Level::Fail);
        Report { program: program.to_owned(), ok, findings }
    }

    /// The process exit status: 0 when no check failed (warnings are advice), 1 when one did.
    pub fn exit_status(&self) -> u8 {
        u8::from(!self.ok)
    }

    /// The findings, one line each, then a summary line.
    pub fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        for f in &self.findings {
            write!(out, "{:<4}  {}: {}", f.level.word(), f.check, f.finding)?;
            if let Some(fix) = f.fix.as_deref().filter(|_| f.level != Level::Ok) {
                write!(out, "; fix: {fix}")?;
            }
            writeln!(out)?;
        }
        let count = |l| self.findings.iter().filter(|f| f.level == l).count();
        writeln!(
            out,
            "{} doctor: {} failed, {} warnings, {} checks",
            self.program,
            count(Level::Fail),
            count(Level::Warn),
            self.findings.len()
        )
    }

    /// The report as one JSON object (`program`, `ok`, `findings` with `level`, `check`, `finding`, `fix`).
    pub fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self)?;
        writeln!(out)
    }
}

/// The exit status of a doctor that could not check (the configuration unreadable, the output unwritable).
pub const CANNOT_CHECK: u8 = 2;

/// Print `outcome` for `program`'s doctor to stdout (JSON when `json`) and give its exit status: the report's, or
/// [`CANNOT_CHECK`] with the error as one line on stderr.
pub fn finish(
    program: &str,
    outcome: Result<Report, &(dyn std::error::Error + 'static)>,
    json: bool,
) -> std::process::ExitCode {
    let cannot = |e: &(dyn std::error::Error + 'static)| {
        eprintln!("{program} doctor: cannot check: {}", crate::error_line::error_line(e));
        std::process::ExitCode::from(CANNOT_CHECK)
    };
    let report = match outcome {
        Ok(report) => report,
        Err(e) => return cannot(e),
    };
    let mut out = io::stdout().lock();
    let written = if json { report.write_json(&mut out) } else { report.write_text(&mut out) };
    match written.and_then(|()| out.flush()) {
        Ok(()) => std::process::ExitCode::from(report.exit_status()),
        Err(e) => cannot(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_fixes_json_and_exit_status() {
        let report = Report::new(
            "nvmf-target",
            vec![
                Finding::ok("io_uring", "available"),
                Finding::warn("hugepages", "0 free", "echo 64 > /proc/sys/vm/nr_hugepages"),
                Finding::fail("memlock", "1 MiB", "ulimit -l unlimited"),
                Finding::fail("x", "y", "z").at_most(Level::Info),
            ],
        );
        let mut text = Vec::new();
        report.write_text(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "ok    io_uring: available");
        assert_eq!(lines[1], "warn  hugepages: 0 free; fix: echo 64 > /proc/sys/vm/nr_hugepages");
        assert_eq!(lines[2], "fail  memlock: 1 MiB; fix: ulimit -l unlimited");
        assert_eq!(lines[3], "info  x: y; fix: z");
        assert_eq!(lines[4], "nvmf-target doctor: 1 failed, 1 warnings, 4 checks");
        assert_eq!(report.exit_status(), 1);

        let mut json = Vec::new();
        report.write_json(&mut json).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["findings"][2]["level"], "fail");
        assert_eq!(v["findings"][2]["check"], "memlock");
        assert!(v["findings"][0].get("fix").is_none());
        assert_eq!(Report::new("h", vec![Finding::warn("a", "b", "c")]).exit_status(), 0);
    }
}
