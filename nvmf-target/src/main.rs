//! The nvmf-target daemon.

fn main() {
    eprintln!("nvmf-target: not yet implemented: this build has the wire layer only");
    std::process::exit(2);
}
