//! Progress bars with rate and ETA for long work (hidden when output is machine-read).

use indicatif::{ProgressBar, ProgressStyle};

/// A bar over `total` bytes of input; hidden when `quiet` (e.g. `--json`) or stderr is not a
/// terminal, so scripts get clean output.
pub fn bytes_bar(total: u64, what: &str, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg:>8} [{bar:30}] {percent:>3}% {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}
