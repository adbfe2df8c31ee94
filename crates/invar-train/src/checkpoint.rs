//! Checkpoints: `run_dir/checkpoints/ckpt-{epoch:06}/` holding `model.safetensors` (the weights),
//! `optimizer.safetensors` (the optimiser's state tensors) and `state.json` (epoch, step, RNG state,
//! early-stopping state, metric history, the resolved configs). Each file is written atomically into a
//! hidden temporary directory that is renamed into place last, so a checkpoint directory either holds
//! a complete checkpoint or does not exist; a policy keeps the newest N and the best.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::early_stop::{EarlyStoppingState, StopReason};
use crate::log::EpochRecord;
use crate::{Error, Optimizer, Result};

/// Version of the checkpoint layout written by this crate.
pub const CHECKPOINT_FORMAT: u32 = 1;

const MODEL_FILE: &str = "model.safetensors";
const OPTIMIZER_FILE: &str = "optimizer.safetensors";
const STATE_FILE: &str = "state.json";

/// The exact position of a ChaCha8 stream: seed, stream and word position (as text: it is a u128).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState {
    pub seed: String,
    pub stream: u64,
    pub word_pos: String,
}

impl RngState {
    /// Captures `rng`'s position.
    pub fn capture(rng: &ChaCha8Rng) -> Self {
        let seed = rng.get_seed().iter().map(|b| format!("{b:02x}")).collect();
        Self {
            seed,
            stream: rng.get_stream(),
            word_pos: rng.get_word_pos().to_string(),
        }
    }

    /// Rebuilds a generator at exactly the captured position.
    pub fn restore(&self, source: &Path) -> Result<ChaCha8Rng> {
        use rand::SeedableRng;
        let bad = |what: &str| Error::file(source, format!("rng state: {what}"));
        if self.seed.len() != 64 {
            return Err(bad("seed must be 64 hex digits"));
        }
        let mut seed = [0u8; 32];
        for (i, b) in seed.iter_mut().enumerate() {
            *b = u8::from_str_radix(&self.seed[2 * i..2 * i + 2], 16)
                .map_err(|_| bad("seed is not hex"))?;
        }
        let word_pos: u128 = self
            .word_pos
            .parse()
            .map_err(|_| bad("word_pos is not a number"))?;
        let mut rng = ChaCha8Rng::from_seed(seed);
        rng.set_stream(self.stream);
        rng.set_word_pos(word_pos);
        Ok(rng)
    }
}

/// Everything in `state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainState {
    pub format: u32,
    /// Epochs completed.
    pub epoch: usize,
    /// Optimiser steps completed.
    pub step: u64,
    pub optimizer_kind: String,
    pub optimizer_steps: u64,
    /// The generator's position after `epoch`, i.e. where epoch `epoch + 1` starts.
    pub rng: RngState,
    pub early_stopping: EarlyStoppingState,
    pub history: Vec<EpochRecord>,
    /// Set when the run ended at this checkpoint.
    pub stopped: Option<StopReason>,
    pub train_config: TrainConfig,
    pub method_config: serde_json::Value,
}

/// A checkpoint read completely into memory (nothing applied yet).
#[derive(Debug)]
pub struct Checkpoint {
    pub path: PathBuf,
    pub weights: HashMap<String, Tensor>,
    pub optimizer: HashMap<String, Tensor>,
    pub state: TrainState,
}

/// `run_dir/checkpoints`.
pub fn checkpoints_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoints")
}

/// `run_dir/checkpoints/ckpt-{epoch:06}`.
pub fn checkpoint_path(run_dir: &Path, epoch: usize) -> PathBuf {
    checkpoints_dir(run_dir).join(format!("ckpt-{epoch:06}"))
}

/// The checkpoints present (complete directories named `ckpt-N`), sorted by epoch.
pub fn list_checkpoints(run_dir: &Path) -> Result<Vec<(usize, PathBuf)>> {
    let dir = checkpoints_dir(run_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::file(&dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::file(&dir, e))?;
        let name = entry.file_name();
        let Some(epoch) = name
            .to_str()
            .and_then(|n| n.strip_prefix("ckpt-"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        if entry.path().is_dir() {
            out.push((epoch, entry.path()));
        }
    }
    out.sort_by_key(|(e, _)| *e);
    Ok(out)
}

/// Removes checkpoint directories left half-written by a killed process (`.ckpt-*.tmp-*`).
pub fn remove_stale_temporaries(run_dir: &Path) -> Result<()> {
    let dir = checkpoints_dir(run_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::file(&dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::file(&dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(".ckpt-") && name.contains(".tmp-") && entry.path().is_dir() {
            tracing::debug!(
                "removing the unfinished checkpoint {}",
                entry.path().display()
            );
            std::fs::remove_dir_all(entry.path()).map_err(|e| Error::file(entry.path(), e))?;
        }
    }
    Ok(())
}

/// The retention policy: of the checkpoints at `epochs`, which to delete so that the newest
/// `keep_last` remain, plus `best` if given.
pub fn checkpoints_to_remove(
    epochs: &[usize],
    keep_last: usize,
    best: Option<usize>,
) -> Vec<usize> {
    let mut sorted = epochs.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let cut = sorted.len().saturating_sub(keep_last);
    sorted[..cut]
        .iter()
        .copied()
        .filter(|&e| Some(e) != best)
        .collect()
}

/// The model's variables sorted by name.
pub(crate) fn named_vars(varmap: &VarMap) -> Result<Vec<(String, candle_core::Var)>> {
    let data = varmap.data().lock().map_err(|_| Error::Poisoned)?;
    let mut named: Vec<_> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(named)
}

fn safetensors_bytes(path: &Path, tensors: Vec<(String, Tensor)>) -> Result<Vec<u8>> {
    safetensors::serialize(tensors.iter().map(|(k, t)| (k.as_str(), t)), None)
        .map_err(|e| Error::file(path, e))
}

/// Writes the model weights alone to `path` as safetensors, atomically.
pub fn save_weights(varmap: &VarMap, path: &Path) -> Result<()> {
    let tensors = named_vars(varmap)?
        .into_iter()
        .map(|(k, v)| (k, v.as_tensor().clone()))
        .collect();
    let bytes = safetensors_bytes(path, tensors)?;
    invar_io::atomic_write(path, |w| w.write_all(&bytes))?;
    Ok(())
}

/// Writes a complete checkpoint for `state.epoch` and returns its directory.
pub fn save_checkpoint(
    run_dir: &Path,
    varmap: &VarMap,
    optimizer: &Optimizer,
    state: &TrainState,
) -> Result<PathBuf> {
    let root = checkpoints_dir(run_dir);
    std::fs::create_dir_all(&root).map_err(|e| Error::file(&root, e))?;
    let final_path = checkpoint_path(run_dir, state.epoch);
    let tmp = root.join(format!(
        ".ckpt-{:06}.tmp-{}",
        state.epoch,
        std::process::id()
    ));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| Error::file(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| Error::file(&tmp, e))?;
    let result = (|| -> Result<()> {
        save_weights(varmap, &tmp.join(MODEL_FILE))?;
        let opt_path = tmp.join(OPTIMIZER_FILE);
        let bytes = safetensors_bytes(&opt_path, optimizer.state_tensors())?;
        invar_io::atomic_write(&opt_path, |w| w.write_all(&bytes))?;
        invar_io::write_json(tmp.join(STATE_FILE), state)?;
        if final_path.exists() {
            // An older checkpoint of the same epoch (from a run that was resumed before it): replace it.
            std::fs::remove_dir_all(&final_path).map_err(|e| Error::file(&final_path, e))?;
        }
        std::fs::rename(&tmp, &final_path).map_err(|e| Error::file(&final_path, e))?;
        // Make the rename durable.
        if let Ok(dir) = std::fs::File::open(&root) {
            let _ = dir.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result.map(|()| final_path)
}

fn read_safetensors(path: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    let bytes = std::fs::read(path).map_err(|e| Error::file(path, e))?;
    candle_core::safetensors::load_buffer(&bytes, device).map_err(|e| Error::file(path, e))
}

/// Reads a checkpoint completely: every file present and parseable.
pub fn load_checkpoint(path: &Path, device: &Device) -> Result<Checkpoint> {
    let state_path = path.join(STATE_FILE);
    let state: TrainState = invar_io::read_json(&state_path)?;
    if state.format != CHECKPOINT_FORMAT {
        return Err(Error::file(
            &state_path,
            format!(
                "checkpoint format {} (this build reads {CHECKPOINT_FORMAT})",
                state.format
            ),
        ));
    }
    let weights = read_safetensors(&path.join(MODEL_FILE), device)?;
    let optimizer = read_safetensors(&path.join(OPTIMIZER_FILE), device)?;
    Ok(Checkpoint {
        path: path.to_path_buf(),
        weights,
        optimizer,
        state,
    })
}

/// Checks that `weights` holds exactly the model's variables with their shapes and dtypes.
pub fn check_weights(
    varmap: &VarMap,
    weights: &HashMap<String, Tensor>,
    source: &Path,
) -> Result<()> {
    let vars = named_vars(varmap)?;
    for (name, var) in &vars {
        let expected = format!("{:?} {:?}", var.dims(), var.dtype());
        match weights.get(name) {
            None => {
                return Err(Error::CheckpointMismatch {
                    path: source.to_path_buf(),
                    name: name.clone(),
                    expected,
                    found: "nothing".into(),
                })
            }
            Some(t) if t.dims() != var.dims() || t.dtype() != var.dtype() => {
                return Err(Error::CheckpointMismatch {
                    path: source.to_path_buf(),
                    name: name.clone(),
                    expected,
                    found: format!("{:?} {:?}", t.dims(), t.dtype()),
                })
            }
            Some(_) => {}
        }
    }
    if let Some(extra) = weights.keys().find(|k| !vars.iter().any(|(n, _)| n == *k)) {
        return Err(Error::CheckpointMismatch {
            path: source.to_path_buf(),
            name: extra.clone(),
            expected: "no such variable in the model".into(),
            found: "a tensor".into(),
        });
    }
    Ok(())
}

/// Copies checked weights into the model's variables.
pub fn apply_weights(
    varmap: &VarMap,
    weights: &HashMap<String, Tensor>,
    source: &Path,
) -> Result<()> {
    check_weights(varmap, weights, source)?;
    for (name, var) in named_vars(varmap)? {
        if let Some(t) = weights.get(&name) {
            var.set(&t.to_device(var.device())?)?;
        }
    }
    Ok(())
}

/// Loads safetensors weights from `path` into the model (e.g. a finished run's `model.safetensors`).
pub fn load_weights(varmap: &VarMap, path: &Path) -> Result<()> {
    let device = named_vars(varmap)?
        .first()
        .map_or(Device::Cpu, |(_, v)| v.device().clone());
    let weights = read_safetensors(path, &device)?;
    apply_weights(varmap, &weights, path)
}

/// The newest checkpoint that loads completely and fits `varmap` and `optimizer`; broken or
/// mismatching newer ones are skipped with a warning (and left on disk for inspection).
pub fn newest_good_checkpoint(
    run_dir: &Path,
    device: &Device,
    varmap: &VarMap,
    optimizer: &Optimizer,
) -> Result<Option<Checkpoint>> {
    for (_, path) in list_checkpoints(run_dir)?.into_iter().rev() {
        let loaded = load_checkpoint(&path, device).and_then(|c| {
            check_weights(varmap, &c.weights, &c.path.join(MODEL_FILE))?;
            if c.state.optimizer_kind != optimizer.config().kind() {
                return Err(Error::OptimizerMismatch {
                    path: c.path.clone(),
                    expected: optimizer.config().kind().into(),
                    found: c.state.optimizer_kind.clone(),
                });
            }
            optimizer.check_state(&c.optimizer, &c.path.join(OPTIMIZER_FILE))?;
            Ok(c)
        });
        match loaded {
            Ok(c) => return Ok(Some(c)),
            Err(e) => tracing::warn!("skipping checkpoint {}: {e}", path.display()),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_keeps_last_n_and_the_best() {
        assert_eq!(
            checkpoints_to_remove(&[1, 2, 3, 4, 5], 2, Some(2)),
            vec![1, 3]
        );
        assert_eq!(
            checkpoints_to_remove(&[1, 2, 3, 4, 5], 2, Some(5)),
            vec![1, 2, 3]
        );
        assert_eq!(
            checkpoints_to_remove(&[1, 2, 3, 4, 5], 2, None),
            vec![1, 2, 3]
        );
        assert_eq!(
            checkpoints_to_remove(&[3, 1, 2], 5, None),
            Vec::<usize>::new()
        );
        assert_eq!(checkpoints_to_remove(&[1, 2, 3], 1, Some(1)), vec![2]);
    }

    #[test]
    fn rng_state_round_trips_mid_stream() -> Result<()> {
        use rand::{Rng, SeedableRng};
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        rng.set_stream(7);
        let _: Vec<u32> = (0..13).map(|_| rng.random()).collect();
        let saved = RngState::capture(&rng);
        let text = serde_json::to_string(&saved).map_err(|e| Error::file("json", e))?;
        let back: RngState = serde_json::from_str(&text).map_err(|e| Error::file("json", e))?;
        let mut restored = back.restore(Path::new("state.json"))?;
        let a: Vec<u64> = (0..50).map(|_| rng.random()).collect();
        let b: Vec<u64> = (0..50).map(|_| restored.random()).collect();
        assert_eq!(a, b);
        Ok(())
    }
}
