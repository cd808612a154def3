//! Runs inside the test VM (scenario `cargo_binary_runs_in_guest`): proves that a binary cargo built on the
//! host runs in the guest, and reports what the guest offers.

use std::fs;
use std::path::Path;

fn main() {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_else(|e| format!("unknown ({e})"));
    println!("kernel-release: {}", release.trim());
    let uverbs = if Path::new("/dev/infiniband/uverbs0").exists() { "present" } else { "absent" };
    println!("uverbs0: {uverbs}");
    let configfs = if Path::new("/sys/kernel/config/nvmet").is_dir() { "present" } else { "absent" };
    println!("nvmet-configfs: {configfs}");
}
