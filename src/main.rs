//! The plbbench binary: parse arguments, call `plbbench::run`, map errors to
//! exit statuses (2 bad input, 1 failed run) with one line on stderr.

use clap::Parser;

fn main() {
    let cli = plbbench::cli::Cli::parse();
    if let Err(e) = plbbench::run(cli) {
        match &e {
            plbbench::Error::Input(msg) => eprintln!("plbbench: error: {msg}"),
            plbbench::Error::Run(err) => eprintln!("plbbench: error: {err:#}"),
        }
        std::process::exit(e.exit_code());
    }
}
