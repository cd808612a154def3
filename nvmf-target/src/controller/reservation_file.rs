//! The reservation state of a namespace on disk, for Persist Through Power Loss (PTPL): one JSON file per
//! namespace in the target's state directory (`[target] state_dir`), written atomically (a temporary file in the
//! same directory, fsync, rename over the old one, fsync of the directory) before the reservation command that
//! changed the state completes, and read back when the namespace is created.
//!
//! The format is versioned (`"version": 1`) and validated when read: an unknown version, a malformed host ID,
//! a reservation type outside 1..=6, a holder that is not a registrant, a host registered twice or more than
//! [`MAX_REGISTRANTS`] registrants is an error naming the file (the caller logs it and starts without
//! reservations). Called from the reservation commands, on the reactor that runs them: writing blocks that
//! reactor for the fsyncs, which the spec's PTPL needs before the command completes; reservation commands are
//! rare control-plane traffic.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use nvmf_common::nvme::reservation::ReservationType;
use serde::{Deserialize, Serialize};

use super::reservation::{Held, Registrant, Registrants, ReservationState};

/// The file format version written and accepted.
pub const FORMAT_VERSION: u32 = 1;

/// More registrants than this in a file is an error: above the largest `[target] max_registrants`, so a file the
/// target wrote is never refused.
pub const MAX_REGISTRANTS: usize = 1 << 16;

/// A reservation state file could not be read, validated or written.
#[derive(Debug, thiserror::Error)]
pub enum ReservationFileError {
    /// Reading, writing, renaming or syncing failed.
    #[error("reservation state file {path}: {what}: {source}")]
    Io {
        /// The file (or its directory).
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The file is not a valid reservation state.
    #[error("reservation state file {path} is invalid: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRegistrant {
    /// 32 hex digits.
    hostid: String,
    key: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileReservation {
    rtype: u8,
    /// 32 hex digits.
    holder: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileState {
    version: u32,
    generation: u32,
    registrants: Vec<FileRegistrant>,
    reservation: Option<FileReservation>,
}

fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 || !s.is_ascii() {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(id)
}

/// The file of namespace `nsid` of subsystem `subnqn` in `state_dir`: the NQN with every character other than
/// ASCII letters, digits, `.`, `-` and `:` replaced by `_`.
pub fn path_for(state_dir: &Path, subnqn: &str, nsid: u32) -> PathBuf {
    let name: String = subnqn
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':') { c } else { '_' })
        .collect();
    state_dir.join("reservations").join(format!("{name}.ns{nsid}.json"))
}

fn invalid(path: &Path, reason: impl Into<String>) -> ReservationFileError {
    ReservationFileError::Invalid { path: path.to_owned(), reason: reason.into() }
}

/// Parse and validate a state file's text.
fn decode(path: &Path, text: &str) -> Result<ReservationState, ReservationFileError> {
    let file: FileState = serde_json::from_str(text).map_err(|e| invalid(path, e.to_string()))?;
    if file.version != FORMAT_VERSION {
        return Err(invalid(path, format!("version {} is not {FORMAT_VERSION}", file.version)));
    }
    if file.registrants.len() > MAX_REGISTRANTS {
        return Err(invalid(path, format!("more than {MAX_REGISTRANTS} registrants")));
    }
    let mut registrants = Registrants::default();
    for r in &file.registrants {
        let hostid = parse_hex(&r.hostid)
            .ok_or_else(|| invalid(path, format!("host ID {:?} is not 32 hex digits", r.hostid)))?;
        if !registrants.insert(Registrant { hostid, key: r.key }) {
            return Err(invalid(path, format!("host {} is registered twice", r.hostid)));
        }
    }
    let held = match file.reservation {
        None => None,
        Some(res) => {
            let rtype = ReservationType::from_u8(res.rtype)
                .ok_or_else(|| invalid(path, format!("reservation type {} is not 1..=6", res.rtype)))?;
            let holder = parse_hex(&res.holder)
                .ok_or_else(|| invalid(path, format!("holder {:?} is not 32 hex digits", res.holder)))?;
            if !registrants.contains(&holder) {
                return Err(invalid(path, "the reservation holder is not a registrant"));
            }
            Some(Held { rtype, holder })
        }
    };
    Ok(ReservationState { generation: file.generation, registrants, held, ptpl: true })
}

fn encode(state: &ReservationState) -> String {
    let file = FileState {
        version: FORMAT_VERSION,
        generation: state.generation,
        registrants: state.registrants.iter().map(|r| FileRegistrant { hostid: hex(&r.hostid), key: r.key }).collect(),
        reservation: state.held.map(|h| FileReservation { rtype: h.rtype.to_u8(), holder: hex(&h.holder) }),
    };
    // Serializing plain strings and integers cannot fail.
    serde_json::to_string_pretty(&file).unwrap_or_default()
}

/// The persisted state in `path` (PTPL on), `None` if there is no file.
pub fn load(path: &Path) -> Result<Option<ReservationState>, ReservationFileError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ReservationFileError::Io { path: path.to_owned(), what: "read", source }),
    };
    decode(path, &text).map(Some)
}

fn sync_dir(dir: &Path) -> Result<(), ReservationFileError> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|source| ReservationFileError::Io {
        path: dir.to_owned(),
        what: "sync directory",
        source,
    })
}

/// Write `state` to `path` atomically: temporary file, fsync, rename, fsync of the directory.
pub fn store(path: &Path, state: &ReservationState) -> Result<(), ReservationFileError> {
    let io_err = |what, source| ReservationFileError::Io { path: path.to_owned(), what, source };
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| io_err("create directory", e))?;
    let tmp = path.with_extension("json.tmp");
    {
        let mut f = fs::File::create(&tmp).map_err(|e| io_err("create temporary file", e))?;
        f.write_all(encode(state).as_bytes()).map_err(|e| io_err("write", e))?;
        f.sync_all().map_err(|e| io_err("sync", e))?;
    }
    fs::rename(&tmp, path).map_err(|e| io_err("rename", e))?;
    sync_dir(dir)
}

/// Remove `path` (PTPL turned off); a missing file is fine.
pub fn remove(path: &Path) -> Result<(), ReservationFileError> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(path.parent().unwrap_or(Path::new("."))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ReservationFileError::Io { path: path.to_owned(), what: "remove", source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ReservationState {
        ReservationState {
            generation: 3,
            registrants: [Registrant { hostid: [1; 16], key: 1 }, Registrant { hostid: [2; 16], key: u64::MAX }]
                .into_iter()
                .collect(),
            held: Some(Held { rtype: ReservationType::WriteExclusive, holder: [2; 16] }),
            ptpl: true,
        }
    }

    #[test]
    fn round_trip_and_remove() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_for(dir.path(), "nqn.2024-01.io/x:y", 3);
        assert_eq!(path.file_name().unwrap(), "nqn.2024-01.io_x:y.ns3.json");
        assert_eq!(load(&path).unwrap(), None);
        store(&path, &state()).unwrap();
        assert_eq!(load(&path).unwrap(), Some(state()));
        assert!(!path.with_extension("json.tmp").exists());
        remove(&path).unwrap();
        assert_eq!(load(&path).unwrap(), None);
        remove(&path).unwrap();
    }

    #[test]
    fn invalid_files_name_the_file() {
        let p = Path::new("/x/ns.json");
        let cases = [
            "not json",
            r#"{"version":2,"generation":0,"registrants":[],"reservation":null}"#,
            r#"{"version":1,"generation":0,"registrants":[{"hostid":"zz","key":1}],"reservation":null}"#,
            r#"{"version":1,"generation":0,"registrants":[],"reservation":{"rtype":1,"holder":"01010101010101010101010101010101"}}"#,
            r#"{"version":1,"generation":0,"registrants":[{"hostid":"01010101010101010101010101010101","key":1}],"reservation":{"rtype":9,"holder":"01010101010101010101010101010101"}}"#,
            r#"{"version":1,"generation":0,"registrants":[{"hostid":"01010101010101010101010101010101","key":1},{"hostid":"01010101010101010101010101010101","key":2}],"reservation":null}"#,
            r#"{"version":1,"generation":0,"registrants":[],"reservation":null,"extra":1}"#,
        ];
        for text in cases {
            let e = decode(p, text).unwrap_err();
            assert!(e.to_string().contains("/x/ns.json"), "{e}");
        }
        let good = encode(&state());
        assert_eq!(decode(p, &good).unwrap(), state());
    }
}
