//! What the three methods' `step_time` examples share (`cargo xtask bench --peers` runs them):
//! the common flags (`--steps`, `--warmup`, `--threads`, `--device`, `--seed`, `--check-dir`),
//! how many steps a run makes, which of its seconds are timed, and the weights a check folder
//! holds. Each example keeps its own model flags and its JSON line.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::Tensor;
use candle_nn::VarMap;

use crate::{Error, Result, TrainSummary};

/// Steps a `--check-dir` run makes: the first losses the equality check compares.
pub const CHECK_STEPS: usize = 3;

/// The flags every `step_time` example takes.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTimeFlags {
    /// Timed steps after the warm-up (`--steps`, default 10).
    pub steps: usize,
    /// Untimed steps first (`--warmup`, default 2).
    pub warmup: usize,
    /// CPU threads, 0 for one per core (`--threads`, default 0).
    pub threads: usize,
    /// `cpu`, `cuda` or `cuda:N` (`--device`, default cpu).
    pub device: String,
    /// Seed of the weights and the synthetic batch (`--seed`, default 0).
    pub seed: u64,
    /// Write the weights, inputs and first losses here for the peer check (`--check-dir`).
    pub check_dir: Option<PathBuf>,
}

impl Default for StepTimeFlags {
    fn default() -> Self {
        Self {
            steps: 10,
            warmup: 2,
            threads: 0,
            device: "cpu".into(),
            seed: 0,
            check_dir: None,
        }
    }
}

impl StepTimeFlags {
    /// Reads `args` (the command line without the program name): the common flags here, any other
    /// through `extra(flag, value)`, which takes the flag's value by calling `value` and returns
    /// `Ok(false)` for a flag it does not know (an error naming it). `--steps 0` is refused.
    pub fn parse<E: From<Error>>(
        args: impl IntoIterator<Item = String>,
        mut extra: impl FnMut(&str, &mut dyn FnMut() -> Result<String>) -> std::result::Result<bool, E>,
    ) -> std::result::Result<Self, E> {
        let mut flags = Self::default();
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next().ok_or_else(|| Error::Config {
                    field: "step_time",
                    reason: format!("`{flag}` needs a value"),
                })
            };
            match flag.as_str() {
                "--steps" => flags.steps = number(&flag, value()?)?,
                "--warmup" => flags.warmup = number(&flag, value()?)?,
                "--threads" => flags.threads = number(&flag, value()?)?,
                "--device" => flags.device = value()?,
                "--seed" => flags.seed = number(&flag, value()?)?,
                "--check-dir" => flags.check_dir = Some(value()?.into()),
                other => {
                    if !extra(other, &mut value)? {
                        return Err(Error::Config {
                            field: "step_time",
                            reason: format!(
                                "unknown flag `{other}` (see the header of examples/step_time.rs)"
                            ),
                        }
                        .into());
                    }
                }
            }
        }
        if flags.steps == 0 {
            return Err(Error::Config {
                field: "step_time",
                reason: "--steps must be at least 1".into(),
            }
            .into());
        }
        Ok(flags)
    }

    /// Steps (epochs of one batch) the run makes: [`CHECK_STEPS`] with `--check-dir`, else the
    /// warm-up and the timed steps.
    pub fn total_steps(&self) -> usize {
        if self.check_dir.is_some() {
            CHECK_STEPS
        } else {
            self.warmup + self.steps
        }
    }

    /// The seconds of the timed steps: all of them with `--check-dir`, else those after the
    /// warm-up.
    pub fn timed(&self, seconds: Vec<f64>) -> Vec<f64> {
        if self.check_dir.is_some() {
            seconds
        } else {
            seconds[self.warmup.min(seconds.len())..].to_vec()
        }
    }

    /// The example's one JSON line (for it to print): `fields` (an object: the model, variant, shapes,
    /// optimizer and any numbers of the example's own) with what every example reports (the
    /// device, threads, warm-up, the timed steps' seconds and the losses of `summary`, the
    /// version, which `fields` may replace); with `--check-dir`, also written there as `NAME.json` for the peer's check.
    pub fn report(
        &self,
        name: &str,
        threads: usize,
        summary: &TrainSummary,
        fields: serde_json::Value,
    ) -> Result<serde_json::Value> {
        let serde_json::Value::Object(fields) = fields else {
            return Err(Error::Config {
                field: "step_time",
                reason: "the example's fields must be a JSON object".into(),
            });
        };
        let mut out = serde_json::Map::new();
        out.insert("impl".into(), "invar".into());
        out.insert("device".into(), self.device.clone().into());
        out.insert("threads".into(), threads.into());
        out.insert("warmup".into(), self.warmup.into());
        out.insert(
            "step_seconds".into(),
            self.timed(summary.series("seconds")?).into(),
        );
        out.insert("losses".into(), summary.series("train_loss")?.into());
        out.insert(
            "version".into(),
            format!("invar {} (candle 0.11)", env!("CARGO_PKG_VERSION")).into(),
        );
        // The example's own fields win (its `version` names the kernels it ran on, which
        // invar-train, below invar-ops, cannot ask for).
        out.extend(fields);
        let out = serde_json::Value::Object(out);
        if let Some(dir) = &self.check_dir {
            invar_io::write_json(dir.join(format!("{name}.json")), &out)?;
        }
        Ok(out)
    }
}

/// Parses `value`, the value of `flag`, as a number.
pub fn number<T: std::str::FromStr>(flag: &str, value: String) -> Result<T> {
    value.parse().map_err(|_| Error::Config {
        field: "step_time",
        reason: format!("`{flag}` needs a number, got {value:?}"),
    })
}

/// Copies of the model's variables by name (a check folder's weights).
pub fn weights(varmap: &VarMap) -> Result<HashMap<String, Tensor>> {
    let data = varmap.data().lock().map_err(|_| Error::Poisoned)?;
    data.iter()
        .map(|(k, v)| Ok((k.clone(), v.as_tensor().copy()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn common_flags_extra_flags_and_refusals() {
        let mut batch = 0usize;
        let f = StepTimeFlags::parse::<Error>(
            args("--steps 4 --batch 7 --warmup 1 --device cuda:1 --seed 9"),
            |flag, value| match flag {
                "--batch" => {
                    batch = number(flag, value()?)?;
                    Ok(true)
                }
                _ => Ok(false),
            },
        )
        .unwrap();
        assert_eq!((f.steps, f.warmup, f.seed, batch), (4, 1, 9, 7));
        assert_eq!(f.device, "cuda:1");
        assert_eq!(f.total_steps(), 5);
        assert_eq!(f.timed(vec![1.0, 2.0, 3.0, 4.0, 5.0]), [2.0, 3.0, 4.0, 5.0]);
        let check =
            StepTimeFlags::parse::<Error>(args("--check-dir /tmp/x"), |_, _| Ok(false)).unwrap();
        assert_eq!(check.total_steps(), CHECK_STEPS);
        assert_eq!(check.timed(vec![1.0, 2.0, 3.0]), [1.0, 2.0, 3.0]);
        let refused = |s: &str| {
            StepTimeFlags::parse::<Error>(args(s), |_, _| Ok(false))
                .unwrap_err()
                .to_string()
        };
        assert!(refused("--bogus 1").contains("unknown flag `--bogus`"));
        assert!(refused("--steps").contains("`--steps` needs a value"));
        assert!(refused("--steps x").contains("needs a number, got \"x\""));
        assert!(refused("--steps 0").contains("at least 1"));
    }
}
