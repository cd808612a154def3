//! The nvmf-host daemon.

fn main() {
    eprintln!("nvmf-host: not yet implemented: this build has the wire layer only");
    std::process::exit(2);
}
