//! The one progress bar and status-line helper on stderr: a run's bar
//! counts seconds, an experiment's counts runs, and a note printed while a
//! bar is drawn goes above it instead of through it. Where stderr is not a
//! terminal (a log, CI), `--progress auto` prints status lines instead, as
//! pgbench `-P` and k6 do. A leaf module with no crate imports, so every
//! layer that shows progress may use it.

use indicatif::{ProgressBar, ProgressStyle};

/// What is shown, once `--progress auto` and `--quiet` are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// The bar.
    Bar,
    /// Status lines.
    Lines,
    /// Nothing.
    Nothing,
}

/// A bar of `len` steps named `unit` in its counter (`s`, `runs  eta {eta}`),
/// followed by the bar's message; hidden when `show` is false or there is
/// nothing to count.
pub fn bar(show: bool, len: u64, unit: &str) -> ProgressBar {
    if !show || len == 0 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template(&format!("{{elapsed_precise}} [{{wide_bar}}] {{pos}}/{{len}} {unit}  {{msg}}"))
    {
        bar.set_style(style);
    }
    bar
}

/// A line on stderr above `bar` (directly when the bar is hidden).
pub fn note(bar: &ProgressBar, line: &str) {
    bar.suspend(|| eprintln!("{line}"));
}
