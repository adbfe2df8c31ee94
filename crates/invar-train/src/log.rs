//! The metric log: one JSON object per line in `run_dir/metrics.jsonl`, a `"kind":"epoch"` line per
//! epoch (and `"kind":"step"` lines every `log_every` steps). A resumed run first drops the lines
//! written after its checkpoint, so the log always reads as one uninterrupted run.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use crate::{Error, Result};

/// Named values, sorted by name; non-finite values are written as JSON `null` and read back as NaN.
pub type Metrics = BTreeMap<String, f64>;

/// One epoch's numbers: `train_loss`, `train_<metric>`, `val_<metric>`, `lr`, `grad_norm` (mean global
/// norm before clipping), `seconds`, `samples_per_s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    pub epoch: usize,
    /// Optimiser steps completed by the end of this epoch.
    pub step: u64,
    #[serde(flatten, deserialize_with = "nan_from_null")]
    pub metrics: Metrics,
}

impl EpochRecord {
    /// An empty record.
    pub fn new(epoch: usize, step: u64) -> Self {
        Self {
            epoch,
            step,
            metrics: Metrics::new(),
        }
    }

    /// A metric's value.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.metrics.get(name).copied()
    }

    /// The names of the metrics present.
    pub fn keys(&self) -> Vec<String> {
        self.metrics.keys().cloned().collect()
    }
}

fn nan_from_null<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Metrics, D::Error> {
    let raw = BTreeMap::<String, Option<f64>>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
        .collect())
}

/// The append-only JSONL log of a run.
#[derive(Debug)]
pub struct MetricLog {
    path: PathBuf,
}

impl MetricLog {
    /// Starts a fresh log at `path`, replacing any old one.
    pub fn create(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        invar_io::write_text(&path, "")?;
        Ok(Self { path })
    }

    /// Reopens `path` for a run resumed after `step` optimiser steps: lines of later steps (written
    /// by the interrupted run after its last checkpoint) and torn lines are dropped, atomically.
    pub fn resume(path: impl Into<PathBuf>, step: u64) -> Result<Self> {
        let path = path.into();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Error::file(&path, e)),
        };
        let mut kept = String::with_capacity(text.len());
        for line in text.lines() {
            let keep = serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get("step").and_then(serde_json::Value::as_u64))
                .is_some_and(|s| s <= step);
            if keep {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        invar_io::write_text(&path, &kept)?;
        Ok(Self { path })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends an epoch line.
    pub fn epoch(&self, record: &EpochRecord) -> Result<()> {
        self.append("epoch", record)
    }

    /// Appends a step line.
    pub fn step(&self, record: &EpochRecord) -> Result<()> {
        self.append("step", record)
    }

    fn append(&self, kind: &str, record: &EpochRecord) -> Result<()> {
        let mut value = serde_json::to_value(record).map_err(|e| Error::file(&self.path, e))?;
        if let serde_json::Value::Object(map) = &mut value {
            map.insert("kind".into(), kind.into());
        }
        let mut line = value.to_string();
        line.push('\n');
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.path)
            .map_err(|e| Error::file(&self.path, e))?;
        file.write_all(line.as_bytes())
            .map_err(|e| Error::file(&self.path, e))?;
        Ok(())
    }

    /// Reads the epoch lines back.
    pub fn read_epochs(path: impl AsRef<Path>) -> Result<Vec<EpochRecord>> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::file(path, e))?;
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let value: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| Error::file(path, format!("line {}: {e}", i + 1)))?;
            if value.get("kind").and_then(serde_json::Value::as_str) == Some("epoch") {
                let mut value = value;
                if let serde_json::Value::Object(map) = &mut value {
                    map.remove("kind");
                }
                out.push(
                    serde_json::from_value(value)
                        .map_err(|e| Error::file(path, format!("line {}: {e}", i + 1)))?,
                );
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_drops_lines_after_the_checkpoint_and_torn_lines() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::file("tempdir", e))?;
        let path = dir.path().join("metrics.jsonl");
        let log = MetricLog::create(&path)?;
        for epoch in 1..=3 {
            let mut r = EpochRecord::new(epoch, epoch as u64 * 5);
            r.metrics.insert("train_loss".into(), 1.0 / epoch as f64);
            r.metrics.insert("val_loss".into(), f64::NAN);
            log.epoch(&r)?;
        }
        // A torn final line, as a SIGKILL mid-write would leave.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"{\"epoch\":4,\"st"))
            .map_err(|e| Error::file(&path, e))?;
        MetricLog::resume(&path, 10)?;
        let epochs = MetricLog::read_epochs(&path)?;
        assert_eq!(epochs.len(), 2);
        assert_eq!(epochs[1].epoch, 2);
        assert_eq!(epochs[1].get("train_loss"), Some(0.5));
        assert!(epochs[1].get("val_loss").is_some_and(f64::is_nan));
        Ok(())
    }
}
