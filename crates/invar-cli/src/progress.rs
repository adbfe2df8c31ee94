//! Progress of long loops, shared by every subcommand: an indicatif bar when stderr is a terminal,
//! otherwise a `tracing` line at most every ten seconds (batch jobs).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Progress for long loops: an indicatif bar when stderr is a terminal, otherwise a `tracing` line
/// at most every ten seconds (batch jobs). Safe to advance from many threads.
pub(crate) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u64,
    done: AtomicUsize,
    what: &'static str,
    last_log: Mutex<Instant>,
}

impl Progress {
    pub(crate) fn new(total: u64, what: &'static str) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{msg} [{bar:40}] {pos}/{len} {per_sec} eta {eta}",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(what);
            bar
        });
        Progress {
            bar,
            total,
            done: AtomicUsize::new(0),
            what,
            last_log: Mutex::new(Instant::now()),
        }
    }

    pub(crate) fn inc(&self) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(bar) = &self.bar {
            bar.inc(1);
            return;
        }
        let mut last = self.last_log.lock().unwrap_or_else(|p| p.into_inner());
        if last.elapsed() >= Duration::from_secs(10) {
            *last = Instant::now();
            tracing::info!("{}: {done}/{}", self.what, self.total);
        }
    }

    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        tracing::info!(
            "{}: {}/{} done",
            self.what,
            self.done.load(Ordering::Relaxed),
            self.total
        );
    }
}
