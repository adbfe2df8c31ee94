//! Progress display: an indicatif bar with the running loss and throughput when stderr is a terminal,
//! one `tracing` line per epoch otherwise (batch logs), debug-level lines only when turned off. Each
//! epoch line is printed once.

use std::io::IsTerminal;
use std::time::Duration;

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
