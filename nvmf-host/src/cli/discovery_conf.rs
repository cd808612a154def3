//! `/etc/nvme/discovery.conf`, as nvme-cli reads it for `connect-all` without `-a`: one discovery controller per
//! line, written as that command's options (`-t tcp -a 10.0.0.5 -s 8009`, `--traddr=10.0.0.5 --hostnqn=…`);
//! blank lines and lines starting with `#` are skipped. A line's options win over the command line's, which fill
//! in what a line leaves out.

use std::path::Path;

use clap::Parser;

use super::control::ConnectOptionArgs;
use super::CliError;
use crate::endpoint::Endpoint;

/// Where nvme-cli keeps the discovery controllers to use.
pub const DISCOVERY_CONF: &str = "/etc/nvme/discovery.conf";

/// One line's options.
#[derive(Debug, Parser)]
#[command(no_binary_name = true, args_override_self = true, disable_help_flag = true)]
struct Line {
    #[command(flatten)]
    endpoint: Endpoint,
    #[command(flatten)]
    options: ConnectOptionArgs,
}

/// The discovery controllers `path` lists, each with its connection options over `defaults`.
pub fn read(path: &Path, defaults: &ConnectOptionArgs) -> Result<Vec<(Endpoint, ConnectOptionArgs)>, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        CliError::Options(format!("{}: {e} (give -a, or list discovery controllers there)", path.display()))
    })?;
    let mut entries = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let parsed = Line::try_parse_from(line.split_whitespace()).map_err(|e| {
            let why = e.to_string();
            let why = why.lines().next().unwrap_or_default().trim_start_matches("error: ");
            CliError::Options(format!("{}:{}: {why}", path.display(), n + 1))
        })?;
        entries.push((parsed.endpoint, parsed.options.or(defaults)));
    }
    if entries.is_empty() {
        return Err(CliError::Options(format!("{}: lists no discovery controller", path.display())));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> ConnectOptionArgs {
        Line::try_parse_from(["-a", "x", "-k", "30", "-g"]).unwrap().options
    }

    #[test]
    fn lines_name_discovery_controllers_over_the_command_lines_options() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("discovery.conf");
        std::fs::write(
            &path,
            "# discovery controllers\n\n-t tcp -a 10.0.0.5 -s 8009 -k 10\n--transport=rdma --traddr=10.0.0.6 \
             --hostnqn=nqn.2014-08.org.nvmexpress:uuid:1b4e28ba-2fa1-11d2-883f-0016d3cca427\n",
        )
        .unwrap();
        let entries = read(&path, &defaults()).unwrap();
        let [(a, ao), (b, bo)] = &entries[..] else { panic!("two entries: {entries:?}") };
        assert_eq!((a.transport.name(), a.traddr.as_str(), a.trsvcid.as_str()), ("tcp", "10.0.0.5", "8009"));
        assert_eq!((ao.keep_alive_tmo, ao.hdr_digest), (Some(10), true), "the line's -k wins, -g comes from the CLI");
        assert_eq!((b.transport.name(), b.traddr.as_str(), b.trsvcid.as_str()), ("rdma", "10.0.0.6", "4420"));
        assert_eq!(bo.keep_alive_tmo, Some(30));
        assert!(bo.hostnqn.as_deref().unwrap().ends_with("0016d3cca427"));
    }

    #[test]
    fn a_bad_line_or_an_empty_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("discovery.conf");
        std::fs::write(&path, "-a 10.0.0.5\n-a 10.0.0.6 --queue-depth 4\n").unwrap();
        let err = read(&path, &defaults()).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:2: unexpected argument '--queue-depth'", path.display())), "{err}");
        std::fs::write(&path, "# nothing\n").unwrap();
        assert!(read(&path, &defaults()).unwrap_err().to_string().ends_with("lists no discovery controller"));
        let missing = dir.path().join("absent.conf");
        let err = read(&missing, &defaults()).unwrap_err().to_string();
        assert!(err.contains("No such file") && err.ends_with("(give -a, or list discovery controllers there)"));
    }
}
