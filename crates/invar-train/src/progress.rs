//! The workspace's one progress module. Training: an indicatif bar with the running loss and
//! throughput when stderr is a terminal, one `tracing` line per epoch otherwise (batch logs),
//! debug-level lines only when turned off; each epoch line is printed once. Long loops of the command
//! line ([`ItemProgress`]: utterances of a per-utterance stage, stages of the demo): a bar on a
//! terminal, otherwise a `tracing` line at most every ten seconds.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::config::ProgressMode;
use crate::log::EpochRecord;

#[derive(Debug)]
enum Kind {
    Bar,
    Plain,
    Off,
}

/// The display for one run.
#[derive(Debug)]
pub(crate) struct Progress {
    kind: Kind,
    bar: Option<ProgressBar>,
    epochs: usize,
}

impl Progress {
    pub(crate) fn new(mode: ProgressMode, epochs: usize) -> Self {
        let kind = match mode {
            ProgressMode::Off => Kind::Off,
            ProgressMode::Plain => Kind::Plain,
            ProgressMode::Auto if std::io::stderr().is_terminal() => Kind::Bar,
            ProgressMode::Auto => Kind::Plain,
        };
        Self {
            kind,
            bar: None,
            epochs,
        }
    }

    pub(crate) fn start_epoch(&mut self, epoch: usize, batches: usize) {
        if let Kind::Bar = self.kind {
            let bar =
                ProgressBar::with_draw_target(Some(batches as u64), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed} < {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(format!("epoch {epoch}/{}", self.epochs));
            bar.enable_steady_tick(Duration::from_millis(250));
            self.bar = Some(bar);
        }
    }

    pub(crate) fn step(&self, mean_loss: f64, samples_per_s: f64) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!(
                "loss {mean_loss:.4} · {samples_per_s:.0} samples/s"
            ));
            bar.inc(1);
        }
    }

    pub(crate) fn end_epoch(&mut self, record: &EpochRecord) {
        // Each epoch line is printed once: above the bar on a terminal, as a log line otherwise (a
        // batch job's log keeps its timestamp), and only at debug level when progress is off.
        let line = epoch_line(record, self.epochs);
        match self.kind {
            Kind::Bar => {
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
                eprintln!("{line}");
            }
            Kind::Plain => tracing::info!("{line}"),
            Kind::Off => tracing::debug!("{line}"),
        }
    }
}

/// `epoch 3/10 · step 300 · train_loss 0.1234 · val_loss 0.2000 · 1234 samples/s · 2.1 s`.
pub(crate) fn epoch_line(record: &EpochRecord, epochs: usize) -> String {
    let mut line = format!("epoch {}/{epochs} · step {}", record.epoch, record.step);
    for (k, v) in &record.metrics {
        if matches!(k.as_str(), "seconds" | "samples_per_s") {
            continue;
        }
        line.push_str(&format!(" · {k} {v:.4}"));
    }
    if let Some(s) = record.get("samples_per_s") {
        line.push_str(&format!(" · {s:.0} samples/s"));
    }
    if let Some(s) = record.get("seconds") {
        line.push_str(&format!(" · {s:.1} s"));
    }
    line
}

/// Progress of a long loop over items (utterances, stages): an indicatif bar when stderr is a
/// terminal, otherwise a `tracing` line at most every ten seconds (batch jobs; none with
/// [`ItemProgress::stages`], whose caller logs each stage). Safe to advance from many threads.
#[derive(Debug)]
pub struct ItemProgress {
    bar: Option<ProgressBar>,
    total: u64,
    done: AtomicUsize,
    what: &'static str,
    /// When the last plain line was logged; `None`: no periodic lines.
    last_log: Option<Mutex<Instant>>,
}

impl ItemProgress {
    /// A bar of `total` items named `what`, with rate and ETA.
    pub fn new(total: u64, what: &'static str) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            if let Ok(style) =
                ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(what);
            bar
        });
        Self {
            bar,
            total,
            done: AtomicUsize::new(0),
            what,
            last_log: Some(Mutex::new(Instant::now())),
        }
    }

    /// A bar over `total` long stages showing the elapsed time, with a steady tick so the clock
    /// keeps moving through a long stage (it never looks hung); the message names the stage.
    pub fn stages(total: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(500));
            bar
        });
        Self {
            bar,
            total,
            done: AtomicUsize::new(0),
            what: "stages",
            last_log: None,
        }
    }

    /// Whether a bar is drawn (stderr is a terminal).
    pub fn is_bar(&self) -> bool {
        self.bar.is_some()
    }

    /// Sets the bar's message (the current stage).
    pub fn set_message(&self, message: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(message.to_string());
        }
    }

    /// One more item done.
    pub fn inc(&self) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(bar) = &self.bar {
            bar.inc(1);
            return;
        }
        if let Some(last) = &self.last_log {
            let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
            if last.elapsed() >= Duration::from_secs(10) {
                *last = Instant::now();
                tracing::info!("{}: {done}/{}", self.what, self.total);
            }
        }
    }

    /// Clears the bar and logs the count once.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        if self.last_log.is_some() {
            tracing::info!(
                "{}: {}/{} done",
                self.what,
                self.done.load(Ordering::Relaxed),
                self.total
            );
        }
    }

    /// Items counted so far.
    pub fn done(&self) -> usize {
        self.done.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_progress_counts_every_increment_from_many_threads() {
        // Off a terminal (as under `cargo test`) no bar is drawn and the count is still exact.
        let p = ItemProgress::new(800, "items");
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..100 {
                        p.inc();
                    }
                });
            }
        });
        assert_eq!(p.done(), 800);
        p.finish();
        let stages = ItemProgress::stages(3);
        assert!(!stages.is_bar() || std::io::stderr().is_terminal());
        stages.set_message("a stage");
        stages.inc();
        assert_eq!(stages.done(), 1);
    }
}
