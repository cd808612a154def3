//! A binary's error as the one line its user reads: the error and its causes joined by ": ", a cause left out
//! when the line already says it (libraries often repeat their source in their own message), and never a
//! backtrace, whatever `RUST_BACKTRACE` says (a backtrace is for a crash, not for a missing file).

use std::error::Error;
use std::process::ExitCode;

/// `error` and its sources as one line (see the module docs).
pub fn error_line(error: &(dyn Error + 'static)) -> String {
    let mut line = error.to_string().trim().to_owned();
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        let text = text.trim();
        if !text.is_empty() && !line.contains(text) {
            line.push_str(": ");
            line.push_str(text);
        }
        cause = e.source();
    }
    // One line: a message that carries newlines (a parser's snippet, say) keeps its words.
    line.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Print `error` as `program`'s one line on stderr (with the journal's error priority when stderr is the journal:
/// [`crate::logging::error_prefix`]); the exit status of a failed run.
pub fn report(program: &str, error: &(dyn Error + 'static)) -> ExitCode {
    eprintln!("{}{program}: {}", crate::logging::error_prefix(), error_line(error));
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct E {
        text: &'static str,
        #[source]
        source: Option<Box<E>>,
    }

    fn chain(texts: &[&'static str]) -> E {
        texts.iter().rev().fold(None, |source, &text| Some(E { text, source: source.map(Box::new) })).unwrap()
    }

    #[test]
    fn causes_are_joined_once_on_one_line() {
        let e = chain(&["config /etc/nvmf/target.toml", "cannot read it", "No such file or directory (os error 2)"]);
        assert_eq!(
            error_line(&e),
            "config /etc/nvmf/target.toml: cannot read it: No such file or directory (os error 2)"
        );
        // A message that already says its source does not repeat it.
        let e = chain(&["bind 127.0.0.1:4420: Address in use (os error 98)", "Address in use (os error 98)"]);
        assert_eq!(error_line(&e), "bind 127.0.0.1:4420: Address in use (os error 98)");
        let e = chain(&["first\n  second\n", "inner"]);
        assert_eq!(error_line(&e), "first second: inner");
    }
}
