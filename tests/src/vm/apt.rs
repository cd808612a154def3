//! apt as the harness uses it: this machine's own package lists, or a private state for another Debian suite.
//!
//! A kernel of another suite (trixie-backports for Linux 7.x) comes through a private apt state in the cache: its
//! own `sources.list` (one line, the suite on the Debian mirror this machine's own sources name, never a hard-coded
//! one), its own lists and archive cache, `Dir::Etc::SourceParts` pointed away from the system's. The system's apt
//! state is never touched. The private lists are refreshed when they are more than a day old, so "the newest
//! kernel of the suite" stays the newest; a machine that cannot reach the mirror keeps using what it has.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use super::error::VmError;
use super::kernel::run;
use super::note;

/// How long the private lists of a suite serve before they are refreshed.
const LISTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// One apt state: the system's, or a private one for `suite`.
#[derive(Debug, Clone)]
pub(crate) struct Apt {
    /// `-o` options that point apt at a private state (empty for the system's).
    options: Vec<String>,
    /// The private state's folder, if any.
    state: Option<PathBuf>,
    /// What to call it in messages.
    label: String,
}

impl Apt {
    /// This machine's apt, as configured.
    pub(crate) fn system() -> Self {
        Self { options: Vec::new(), state: None, label: "this machine's apt sources".into() }
    }

    /// A private apt state under `cache` for Debian's `suite` (component main), on this machine's mirror; its lists
    /// fetched or refreshed as needed.
    pub(crate) fn private(cache: &Path, suite: &str) -> Result<Self, VmError> {
        let dir = cache.join(format!("apt-{suite}"));
        for sub in ["lists/partial", "cache/archives/partial"] {
            let d = dir.join(sub);
            fs::create_dir_all(&d).map_err(VmError::io("creating", &d))?;
        }
        let mirror = system_mirror()?;
        let keyring = Path::new("/usr/share/keyrings/debian-archive-keyring.gpg");
        let signed = if keyring.is_file() { format!("[signed-by={}] ", keyring.display()) } else { String::new() };
        let sources = dir.join("sources.list");
        let line = format!("deb {signed}{mirror} {suite} main\n");
        if fs::read_to_string(&sources).ok().as_deref() != Some(&line) {
            fs::write(&sources, &line).map_err(VmError::io("writing", &sources))?;
            // Lists of another mirror or suite are not ours.
            let _ = fs::remove_dir_all(dir.join("lists"));
            fs::create_dir_all(dir.join("lists/partial")).map_err(VmError::io("creating", dir.join("lists")))?;
        }
        let apt = Self {
            options: [
                format!("Dir::Etc::SourceList={}", sources.display()),
                "Dir::Etc::SourceParts=/dev/null".into(),
                format!("Dir::State::Lists={}", dir.join("lists").display()),
                format!("Dir::Cache={}", dir.join("cache").display()),
                // The downloads go to folders of the cache that apt's sandbox user may not be able to write.
                "APT::Sandbox::User=root".into(),
            ]
            .into_iter()
            .flat_map(|o| ["-o".to_owned(), o])
            .collect(),
            state: Some(dir),
            label: format!("{suite} on {mirror}"),
        };
        if apt.lists_age().is_none_or(|age| age > LISTS_MAX_AGE) {
            note(&format!("apt: reading the package lists of {}", apt.label));
            if let Err(e) = apt.update() {
                if apt.lists_age().is_none() {
                    return Err(VmError::Unavailable(format!("apt cannot read {}: {e}", apt.label)));
                }
                note(&format!("apt: {e}; keeping the lists read before"));
            }
        }
        Ok(apt)
    }

    /// How long ago the private state's lists were read (`None`: never; the system's state: zero).
    fn lists_age(&self) -> Option<Duration> {
        let Some(dir) = &self.state else { return Some(Duration::ZERO) };
        let read_at = fs::metadata(dir.join("updated")).ok()?.modified().ok()?;
        Some(SystemTime::now().duration_since(read_at).unwrap_or_default())
    }

    /// `apt-get update` of this state.
    pub(crate) fn update(&self) -> Result<(), VmError> {
        run(Command::new("apt-get").args(&self.options).args(["update", "-qq"]))?;
        if let Some(dir) = &self.state {
            let stamp = dir.join("updated");
            fs::write(&stamp, "").map_err(VmError::io("writing", &stamp))?;
        }
        Ok(())
    }

    /// The packages `package` depends on, as `apt-cache depends` lists them (alternatives and virtual packages
    /// left out).
    pub(crate) fn depends(&self, package: &str) -> Vec<String> {
        let out = run(Command::new("apt-cache").args(&self.options).args(["depends", package])).unwrap_or_default();
        out.lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .filter(|d| !d.starts_with('<'))
            .map(str::to_owned)
            .collect()
    }

    /// Whether apt knows `package`.
    pub(crate) fn knows(&self, package: &str) -> bool {
        Command::new("apt-cache")
            .args(&self.options)
            .args(["show", package])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// `apt-get download` these exact packages into `dir`.
    pub(crate) fn download(&self, packages: &[String], dir: &Path) -> Result<(), VmError> {
        run(Command::new("apt-get").args(&self.options).args(["download", "-qq"]).args(packages).current_dir(dir))
            .map(drop)
    }

    /// What to call this state in messages.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }
}

/// The Debian archive this machine's apt sources name (not its security archive): deb822 `URIs:` of a stanza
/// whose suites are not `-security` ones, or the URI of such a one-line `deb` entry.
pub(crate) fn system_mirror() -> Result<String, VmError> {
    let mut texts = Vec::new();
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut files: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
        files.sort();
        texts.extend(
            files.iter().filter_map(|f| Some((f.extension()?.to_str()? == "sources", fs::read_to_string(f).ok()?))),
        );
    }
    if let Ok(text) = fs::read_to_string("/etc/apt/sources.list") {
        texts.push((false, text));
    }
    for (deb822, text) in &texts {
        if let Some(uri) = if *deb822 { mirror_of_deb822(text) } else { mirror_of_one_line(text) } {
            return Ok(uri);
        }
    }
    Err(VmError::Unavailable("no Debian archive in this machine's apt sources (/etc/apt/sources.list{,.d})".into()))
}

fn mirror_of_deb822(text: &str) -> Option<String> {
    text.split("\n\n").find_map(|stanza| {
        let field = |name: &str| {
            stanza.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(|v| v.trim().to_owned()))
        };
        let suites = field("Suites")?;
        let types = field("Types").unwrap_or_else(|| "deb".into());
        let main_archive = suites.split_whitespace().any(|s| !s.ends_with("-security"));
        (types.split_whitespace().any(|t| t == "deb") && main_archive)
            .then(|| field("URIs"))
            .flatten()
            .and_then(|u| u.split_whitespace().next().map(str::to_owned))
    })
}

fn mirror_of_one_line(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut words = l.split_whitespace().peekable();
        (words.next()? == "deb").then_some(())?;
        if words.peek()?.starts_with('[') {
            // Options: `[a=b c=d]`, possibly several words.
            for w in words.by_ref() {
                if w.ends_with(']') {
                    break;
                }
            }
        }
        let uri = words.next()?;
        let suite = words.next()?;
        (!suite.ends_with("-security")).then(|| uri.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::{mirror_of_deb822, mirror_of_one_line};

    #[test]
    fn the_main_archive_not_the_security_one() {
        let deb822 = "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n\
                      Components: main\n\nTypes: deb\nURIs: http://mirror.example/debian\nSuites: bookworm \
                      bookworm-updates\nComponents: main\n";
        assert_eq!(mirror_of_deb822(deb822).as_deref(), Some("http://mirror.example/debian"));
        let one_line = "# comment\ndeb http://security.debian.org/debian-security bookworm-security main\n\
                        deb [arch=amd64 signed-by=/k.gpg] http://ftp.example/debian bookworm main\n";
        assert_eq!(mirror_of_one_line(one_line).as_deref(), Some("http://ftp.example/debian"));
        assert_eq!(mirror_of_one_line("deb-src http://x/debian bookworm main\n"), None);
    }
}
