//! The plbbench binary: parse arguments, call `plbbench::run`, map errors to
//! exit statuses (2 bad input, 1 failed run or failed checks, 130/143 interrupted) with one line on stderr.

use clap::error::{ContextKind, ErrorKind};
use clap::Parser;

fn main() {
    let cli = match plbbench::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => e.exit(),
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        Err(e) => {
            eprintln!("plbbench: {}", one_line(&e));
            std::process::exit(2);
        }
    };
    if let Err(e) = plbbench::run(cli) {
        match &e {
            plbbench::Error::Input(msg) | plbbench::Error::Checks(msg) => eprintln!("plbbench: error: {msg}"),
            plbbench::Error::Run(err) => eprintln!("plbbench: error: {err:#}"),
            plbbench::Error::Interrupted { .. } => eprintln!("plbbench: {e}"),
        }
        std::process::exit(e.exit_code());
    }
}

/// clap's first line, plus its suggestion ("did you mean") or the valid
/// values when it knows them.
fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or("error: invalid arguments").trim().to_string();
    let list = |v: &clap::error::ContextValue| v.to_string().replace(['[', ']'], "");
    let suggested = e.get(ContextKind::SuggestedArg).or_else(|| e.get(ContextKind::SuggestedValue));
    match (suggested, e.get(ContextKind::ValidValue)) {
        (Some(s), Some(v)) => format!("{first} (did you mean `{}`? possible values: {})", list(s), list(v)),
        (Some(s), None) => format!("{first} (did you mean `{}`?)", list(s)),
        (None, Some(v)) => format!("{first} (possible values: {})", list(v)),
        (None, None) => format!("{first} (see --help)"),
    }
}
