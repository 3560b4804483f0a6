//! What the training commands (`train`, `prune`) share on the command line: reading a keyboard
//! log with its skipped lines reported, and the step bar with its Ctrl-C handler.

use std::io::BufReader;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use laya_text::{read_events, Event, OnError};
use laya_train::{EpochReport, StepReport, TrainHooks};

use crate::CliError;

/// Reads a keyboard log; malformed lines are skipped and the first ones shown, unless `strict`.
pub fn read_log(path: &Path, strict: bool, what: &str) -> Result<Vec<Event>, CliError> {
    let f = std::fs::File::open(path).map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
    let mode = if strict { OnError::Stop } else { OnError::Skip };
    let (events, stats) = read_events(BufReader::new(f), mode)?;
    if stats.skipped > 0 {
        eprintln!("{what}: skipped {} malformed line(s) of {}; first ones:", stats.skipped, path.display());
        for e in &stats.errors {
            eprintln!("  {e}");
        }
    }
    if events.is_empty() {
        return Err(CliError(format!("{} has no usable events", path.display())));
    }
    Ok(events)
}

/// The training step bar, with a Ctrl-C handler that asks the loop to stop at the next batch.
pub struct BarHooks {
    pub bar: ProgressBar,
    pub stop: Arc<AtomicBool>,
}

impl BarHooks {
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        {
            let stop = stop.clone();
            // A second Ctrl-C while the checkpoint is written still kills the process.
            let _ = ctrlc::set_handler(move || {
                if stop.swap(true, Ordering::Relaxed) {
                    std::process::exit(130);
                }
            });
        }
        let bar = ProgressBar::new(1);
        bar.set_style(
            ProgressStyle::with_template("[{elapsed_precise}] [{bar:30}] {pos}/{len} steps ETA {eta} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        BarHooks { bar, stop }
    }
}

impl TrainHooks for BarHooks {
    fn on_step(&mut self, r: &StepReport) {
        self.bar.set_length(r.total_steps as u64);
        self.bar.set_position(r.step as u64);
        self.bar.set_message(format!(
            "epoch {} loss {:.3} (word {:.3} replace {:.3}) {:.0} samples/s",
            r.epoch + 1,
            r.loss.total,
            r.loss.word,
            r.loss.replace,
            r.samples_per_sec
        ));
    }
    fn on_epoch(&mut self, r: &EpochReport) {
        self.bar.println(r.to_string());
    }
    fn should_stop(&mut self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}
