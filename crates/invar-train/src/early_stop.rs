//! Early stopping as a small state machine over epoch records: patience on the monitored metric and
//! Prechelt's GL_α rule. Its state is checkpointed so a resumed run stops where the original would.

use serde::{Deserialize, Serialize};

use crate::config::{EarlyStoppingConfig, Mode};
use crate::log::EpochRecord;
use crate::{Error, Result};

/// Why a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum StopReason {
    /// All configured epochs ran.
    MaxEpochs,
    /// `patience` epochs passed without improvement.
    Patience { epochs_without_improvement: usize },
    /// GL(t) exceeded α.
    GeneralizationLoss { gl: f64, alpha: f64 },
}

/// What the loop remembers between epochs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EarlyStoppingState {
    pub best_value: Option<f64>,
    pub best_epoch: Option<usize>,
    pub epochs_without_improvement: usize,
    /// Lowest value of the GL metric so far (`E_opt`).
    pub gl_opt: Option<f64>,
    /// The last GL(t) in percent.
    pub last_gl: Option<f64>,
}

/// The verdict on one epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub improved: bool,
    pub stop: Option<StopReason>,
}

impl EarlyStoppingState {
    /// Updates the state with one epoch's record and says whether it improved and whether to stop.
    pub fn update(
        &mut self,
        config: &EarlyStoppingConfig,
        record: &EpochRecord,
    ) -> Result<Verdict> {
        let value = record
            .get(&config.monitor)
            .ok_or_else(|| Error::MissingMetric {
                name: config.monitor.clone(),
                available: record.keys(),
            })?;
        let improved = match (self.best_value, config.mode) {
            (None, _) => value.is_finite(),
            (Some(best), Mode::Min) => value < best - config.min_delta,
            (Some(best), Mode::Max) => value > best + config.min_delta,
        };
        if improved {
            self.best_value = Some(value);
            self.best_epoch = Some(record.epoch);
            self.epochs_without_improvement = 0;
        } else {
            self.epochs_without_improvement += 1;
        }
        let mut stop = None;
        if let Some(alpha) = config.gl_alpha {
            let e = record
                .get(&config.gl_monitor)
                .ok_or_else(|| Error::MissingMetric {
                    name: config.gl_monitor.clone(),
                    available: record.keys(),
                })?;
            let opt = self.gl_opt.map_or(e, |o| o.min(e));
            self.gl_opt = Some(opt);
            if opt > 0.0 {
                let gl = 100.0 * (e / opt - 1.0);
                self.last_gl = Some(gl);
                if gl > alpha {
                    stop = Some(StopReason::GeneralizationLoss { gl, alpha });
                }
            }
        }
        if stop.is_none() {
            if let Some(patience) = config.patience {
                if self.epochs_without_improvement >= patience {
                    stop = Some(StopReason::Patience {
                        epochs_without_improvement: self.epochs_without_improvement,
                    });
                }
            }
        }
        Ok(Verdict { improved, stop })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(epoch: usize, val_loss: f64) -> EpochRecord {
        let mut r = EpochRecord::new(epoch, epoch as u64 * 10);
        r.metrics.insert("val_loss".into(), val_loss);
        r
    }

    #[test]
    fn patience_counts_epochs_without_improvement() {
        let config = EarlyStoppingConfig {
            patience: Some(2),
            min_delta: 0.01,
            ..Default::default()
        };
        let mut s = EarlyStoppingState::default();
        // 1.0 best; 0.995 is not better by more than min_delta; 0.5 is; then two bad epochs stop.
        let verdicts: Vec<Verdict> = [1.0, 0.995, 0.5, 0.6, 0.7]
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                s.update(&config, &record(i + 1, v))
                    .expect("metric present")
            })
            .collect();
        let improved: Vec<bool> = verdicts.iter().map(|v| v.improved).collect();
        assert_eq!(improved, [true, false, true, false, false]);
        assert!(verdicts[..4].iter().all(|v| v.stop.is_none()));
        assert_eq!(
            verdicts[4].stop,
            Some(StopReason::Patience {
                epochs_without_improvement: 2
            })
        );
        assert_eq!(s.best_epoch, Some(3));
    }

    #[test]
    fn max_mode_improves_upwards() {
        let config = EarlyStoppingConfig {
            monitor: "val_acc".into(),
            mode: Mode::Max,
            ..Default::default()
        };
        let mut s = EarlyStoppingState::default();
        for (epoch, acc, expect) in [(1, 0.5, true), (2, 0.7, true), (3, 0.6, false)] {
            let mut r = EpochRecord::new(epoch, 0);
            r.metrics.insert("val_acc".into(), acc);
            assert_eq!(
                s.update(&config, &r).expect("metric present").improved,
                expect
            );
        }
        assert_eq!(s.best_value, Some(0.7));
    }

    #[test]
    fn generalization_loss_matches_prechelt() {
        // E_opt = 0.8 after epoch 2; epoch 3: GL = 100·(0.84/0.8 − 1) = 5.0 (not > 5); epoch 4:
        // GL = 100·(0.85/0.8 − 1) = 6.25 > 5 → stop.
        let config = EarlyStoppingConfig {
            gl_alpha: Some(5.0),
            ..Default::default()
        };
        let mut s = EarlyStoppingState::default();
        let mut last = None;
        for (i, v) in [1.0, 0.8, 0.84, 0.85].iter().enumerate() {
            let verdict = s
                .update(&config, &record(i + 1, *v))
                .expect("metric present");
            if i < 3 {
                assert!(verdict.stop.is_none(), "epoch {} stopped early", i + 1);
            }
            last = verdict.stop;
        }
        match last {
            Some(StopReason::GeneralizationLoss { gl, alpha }) => {
                assert!((gl - 6.25).abs() < 1e-9, "gl = {gl}");
                assert_eq!(alpha, 5.0);
            }
            other => panic!("expected GL stop, got {other:?}"),
        }
    }

    #[test]
    fn missing_metric_names_what_exists() {
        let config = EarlyStoppingConfig::default();
        let mut r = EpochRecord::new(1, 1);
        r.metrics.insert("train_loss".into(), 1.0);
        let err = EarlyStoppingState::default()
            .update(&config, &r)
            .expect_err("val_loss is absent");
        assert!(err.to_string().contains("val_loss") && err.to_string().contains("train_loss"));
    }
}
