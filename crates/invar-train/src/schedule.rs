//! Learning-rate schedules, stepped once per epoch on the epoch's record (after validation), with
//! their state checkpointed so a resumed run trains every later epoch at the rate the uninterrupted
//! run would.
//!
//! `reduce_on_plateau` is PyTorch's `torch.optim.lr_scheduler.ReduceLROnPlateau` (torch 2.5.1):
//! the same settings, defaults and rule, checked against its learning rates in the tests below.

use serde::{Deserialize, Serialize};

use crate::config::Mode;
use crate::log::EpochRecord;
use crate::{Error, Result};

/// How "better" is measured against the best value so far (PyTorch's `threshold_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ThresholdMode {
    /// Better means beyond `best · (1 ∓ threshold)`.
    #[default]
    Rel,
    /// Better means beyond `best ∓ threshold`.
    Abs,
}

/// `ReduceLROnPlateau`'s settings, with PyTorch's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlateauConfig {
    /// The epoch-record key watched (validation metrics are prefixed `val_`).
    pub monitor: String,
    pub mode: Mode,
    /// The rate is multiplied by this at each reduction; in (0, 1).
    pub factor: f64,
    /// Reduce once more than this many epochs in a row have not improved.
    pub patience: usize,
    pub threshold: f64,
    pub threshold_mode: ThresholdMode,
    /// Epochs after a reduction during which bad epochs are not counted.
    pub cooldown: usize,
    /// The rate never goes below this.
    pub min_lr: f64,
    /// A reduction smaller than this is not applied.
    pub eps: f64,
}

impl Default for PlateauConfig {
    fn default() -> Self {
        Self {
            monitor: "val_loss".into(),
            mode: Mode::Min,
            factor: 0.1,
            patience: 10,
            threshold: 1e-4,
            threshold_mode: ThresholdMode::Rel,
            cooldown: 0,
            min_lr: 0.0,
            eps: 1e-8,
        }
    }
}

/// The learning rate over epochs; serialised as `{"kind": "reduce_on_plateau", ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LrSchedule {
    /// The optimiser's rate throughout.
    #[default]
    Constant,
    /// PyTorch's `ReduceLROnPlateau`.
    ReduceOnPlateau(PlateauConfig),
}

impl LrSchedule {
    /// Turns out-of-range values into errors before any work starts.
    pub fn validate(&self) -> Result<()> {
        let LrSchedule::ReduceOnPlateau(c) = self else {
            return Ok(());
        };
        if c.monitor.is_empty() {
            return Err(Error::config("lr_schedule.monitor", "must name a metric"));
        }
        if !(c.factor > 0.0 && c.factor < 1.0) {
            return Err(Error::config(
                "lr_schedule.factor",
                format!("must lie in (0, 1), got {}", c.factor),
            ));
        }
        for (field, v) in [
            ("lr_schedule.threshold", c.threshold),
            ("lr_schedule.min_lr", c.min_lr),
            ("lr_schedule.eps", c.eps),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::config(
                    field,
                    format!("must be finite and >= 0, got {v}"),
                ));
            }
        }
        Ok(())
    }
}

/// What the schedule remembers between epochs (checkpointed in `state.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LrScheduleState {
    /// The rate the next epoch trains with; `None` until the first reduction (the optimiser's own).
    pub lr: Option<f64>,
    /// The best monitored value so far; `None` before the first (PyTorch's ±inf).
    pub best: Option<f64>,
    pub num_bad_epochs: usize,
    pub cooldown_counter: usize,
    /// Reductions applied so far.
    pub reductions: usize,
}

impl LrScheduleState {
    /// Takes one epoch's record, trained at `current_lr`, and returns the rate for the next epoch
    /// (`Some` only when it changed).
    pub fn update(
        &mut self,
        schedule: &LrSchedule,
        record: &EpochRecord,
        current_lr: f64,
    ) -> Result<Option<f64>> {
        let LrSchedule::ReduceOnPlateau(c) = schedule else {
            return Ok(None);
        };
        let value = record.get(&c.monitor).ok_or_else(|| Error::MissingMetric {
            name: c.monitor.clone(),
            available: record.keys(),
        })?;
        if is_better(c, value, self.best) {
            self.best = Some(value);
            self.num_bad_epochs = 0;
        } else {
            self.num_bad_epochs += 1;
        }
        if self.cooldown_counter > 0 {
            self.cooldown_counter -= 1;
            self.num_bad_epochs = 0;
        }
        if self.num_bad_epochs <= c.patience {
            return Ok(None);
        }
        self.cooldown_counter = c.cooldown;
        self.num_bad_epochs = 0;
        let new_lr = (current_lr * c.factor).max(c.min_lr);
        if current_lr - new_lr <= c.eps {
            return Ok(None);
        }
        self.lr = Some(new_lr);
        self.reductions += 1;
        Ok(Some(new_lr))
    }
}

/// PyTorch's `is_better`; `best = None` stands for its initial ±inf (a NaN is never better).
fn is_better(c: &PlateauConfig, a: f64, best: Option<f64>) -> bool {
    match (c.mode, c.threshold_mode, best) {
        (Mode::Min, _, None) => a < f64::INFINITY,
        (Mode::Max, _, None) => a > f64::NEG_INFINITY,
        (Mode::Min, ThresholdMode::Rel, Some(b)) => a < b * (1.0 - c.threshold),
        (Mode::Min, ThresholdMode::Abs, Some(b)) => a < b - c.threshold,
        (Mode::Max, ThresholdMode::Rel, Some(b)) => a > b * (c.threshold + 1.0),
        (Mode::Max, ThresholdMode::Abs, Some(b)) => a > b + c.threshold,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The learning rates PyTorch 2.5.1's `ReduceLROnPlateau` gives after each of these metric
    /// values (Adam, lr 1e-3), from the script below, run with torch 2.5.1 (CPU):
    ///
    /// ```text
    /// import torch
    /// metrics = [...]  # METRICS
    /// for c in cases:  # the four configs of `cases()`
    ///     p = torch.nn.Parameter(torch.zeros(1)); opt = torch.optim.Adam([p], lr=1e-3)
    ///     s = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **c)
    ///     for m in metrics: s.step(m); print(opt.param_groups[0]['lr'])
    /// ```
    const METRICS: [f64; 20] = [
        1.0, 0.9, 0.9, 0.89995, 0.95, 0.91, 0.85, 0.86, 0.87, 0.87, 0.86, 0.849, 0.9, 0.9, 0.9,
        0.9, 0.9, 0.9, 0.9, 0.9,
    ];

    fn cases() -> Vec<(PlateauConfig, [f64; 20])> {
        let plateau =
            |mode, factor, patience, threshold, threshold_mode, cooldown, min_lr| PlateauConfig {
                monitor: "val_loss".into(),
                mode,
                factor,
                patience,
                threshold,
                threshold_mode,
                cooldown,
                min_lr,
                eps: 1e-8,
            };
        use Mode::{Max, Min};
        use ThresholdMode::{Abs, Rel};
        vec![
            (
                plateau(Min, 0.5, 2, 1e-4, Rel, 0, 0.0),
                [
                    0.001, 0.001, 0.001, 0.001, 0.0005, 0.0005, 0.0005, 0.0005, 0.0005, 0.00025,
                    0.00025, 0.00025, 0.00025, 0.00025, 0.000125, 0.000125, 0.000125, 6.25e-05,
                    6.25e-05, 6.25e-05,
                ],
            ),
            (
                plateau(Min, 0.1, 1, 0.01, Abs, 2, 2e-6),
                [
                    0.001, 0.001, 0.001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 1e-05, 1e-05,
                    1e-05, 1e-05, 2e-06, 2e-06, 2e-06, 2e-06, 2e-06, 2e-06, 2e-06, 2e-06,
                ],
            ),
            (
                plateau(Max, 0.5, 0, 1e-4, Rel, 1, 1e-4),
                [
                    0.001, 0.0005, 0.0005, 0.00025, 0.00025, 0.000125, 0.000125, 0.0001, 0.0001,
                    0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001,
                    0.0001,
                ],
            ),
            (
                plateau(Min, 0.5, 3, 0.0, Rel, 0, 0.0),
                [
                    0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.0005,
                    0.0005, 0.0005, 0.0005, 0.0005, 0.00025, 0.00025, 0.00025, 0.00025, 0.000125,
                ],
            ),
        ]
    }

    #[test]
    fn reduce_on_plateau_matches_pytorch() {
        for (config, expected) in cases() {
            let schedule = LrSchedule::ReduceOnPlateau(config.clone());
            let mut state = LrScheduleState::default();
            let mut lr = 1e-3;
            for (i, (&m, &want)) in METRICS.iter().zip(&expected).enumerate() {
                let mut r = EpochRecord::new(i + 1, 0);
                r.metrics.insert("val_loss".into(), m);
                if let Some(new) = state.update(&schedule, &r, lr).expect("metric present") {
                    assert!(new < lr, "a reduction must lower the rate");
                    lr = new;
                }
                assert!(
                    (lr - want).abs() <= 1e-12 * want,
                    "{config:?}: after epoch {} lr {lr}, PyTorch {want}",
                    i + 1
                );
            }
        }
    }

    #[test]
    fn constant_never_changes_and_plateau_needs_its_metric() {
        let mut state = LrScheduleState::default();
        let r = EpochRecord::new(1, 0);
        assert_eq!(
            state.update(&LrSchedule::Constant, &r, 1e-3).ok(),
            Some(None)
        );
        let e = state
            .update(
                &LrSchedule::ReduceOnPlateau(PlateauConfig::default()),
                &r,
                1e-3,
            )
            .expect_err("val_loss is absent");
        assert!(e.to_string().contains("val_loss"), "{e}");
    }

    #[test]
    fn a_nan_is_a_bad_epoch() {
        let schedule = LrSchedule::ReduceOnPlateau(PlateauConfig {
            patience: 0,
            ..PlateauConfig::default()
        });
        let mut state = LrScheduleState::default();
        let mut r = EpochRecord::new(1, 0);
        r.metrics.insert("val_loss".into(), f64::NAN);
        let new = state.update(&schedule, &r, 1.0).expect("metric present");
        assert_eq!(new, Some(0.1));
        assert_eq!(state.best, None);
    }

    #[test]
    fn out_of_range_settings_are_refused() {
        for (bad, field) in [
            (
                PlateauConfig {
                    factor: 1.0,
                    ..PlateauConfig::default()
                },
                "factor",
            ),
            (
                PlateauConfig {
                    factor: 0.0,
                    ..PlateauConfig::default()
                },
                "factor",
            ),
            (
                PlateauConfig {
                    min_lr: -1.0,
                    ..PlateauConfig::default()
                },
                "min_lr",
            ),
            (
                PlateauConfig {
                    threshold: f64::NAN,
                    ..PlateauConfig::default()
                },
                "threshold",
            ),
            (
                PlateauConfig {
                    monitor: String::new(),
                    ..PlateauConfig::default()
                },
                "monitor",
            ),
        ] {
            let e = LrSchedule::ReduceOnPlateau(bad)
                .validate()
                .expect_err("out of range");
            assert!(e.to_string().contains(field), "{e}");
        }
        assert!(LrSchedule::ReduceOnPlateau(PlateauConfig::default())
            .validate()
            .is_ok());
    }
}
