//! nvmf-config: the TOML configuration schema of both daemons. The schema lands with the target (issue 4).
