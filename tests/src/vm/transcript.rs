//! A lab scenario's steps as one output: each step's stdout in order, and the first step that failed.

use std::time::Duration;

use super::{GuestStatus, RunningLab, VmOutput};

/// The scenario's steps, in order: each step's stdout, and the first that failed.
#[derive(Debug, Default)]
pub struct Transcript {
    stdout: String,
    stderr: String,
    failed: Option<VmOutput>,
}

impl Transcript {
    /// Add a step's output (the first failing one is kept for the report).
    pub fn step(&mut self, out: VmOutput) {
        self.stdout.push_str(&out.stdout);
        self.stderr.push_str(&out.stderr);
        if !out.success() && self.failed.is_none() {
            self.failed = Some(out);
        }
    }

    /// Add a line of the harness's own.
    pub fn line(&mut self, line: String) {
        self.stdout.push_str(&line);
        self.stdout.push('\n');
    }

    /// The whole scenario as one output named `name`; panics with the first failed step's report.
    pub fn into_output(self, name: &str, lab: &RunningLab, wall_time: Duration) -> VmOutput {
        if let Some(failed) = self.failed {
            panic!("a step failed:\n{}\n--- the scenario's stdout so far ---\n{}", failed.report(), self.stdout);
        }
        VmOutput {
            name: name.into(),
            stdout: self.stdout,
            stderr: self.stderr,
            status: GuestStatus::Exited(0),
            console_tail: String::new(),
            boot_time: Duration::ZERO,
            command_time: wall_time,
            wall_time,
            kernel_release: lab.kernel_release().to_owned(),
        }
    }
}
