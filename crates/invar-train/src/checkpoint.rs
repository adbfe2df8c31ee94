//! Checkpoints: `run_dir/checkpoints/ckpt-{epoch:06}/` holding `model.safetensors` (the weights),
//! `optimizer.safetensors` (the optimiser's state tensors) and `state.json` (epoch, step, RNG state,
//! early-stopping and learning-rate schedule state, metric history, the resolved configs). Each
//! file is written atomically into a hidden temporary directory that is renamed into place last, so
//! a checkpoint directory either holds a complete checkpoint or does not exist; a policy keeps the
//! newest N and the best.
//!
//! `state.json` records the SHA-256 of both tensor files; a checkpoint whose files do not hash to
//! it (a flipped bit, a truncated copy) is refused on load, and a resume skips it with a warning.
//! With `restore_best`, `checkpoints/best.safetensors` holds the best epoch's weights (its epoch in
//! the safetensors metadata, its SHA-256 in every later checkpoint), written whenever the
//! monitored metric improves, so retention can never take the best weights away.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::early_stop::{EarlyStoppingState, StopReason};
use crate::log::EpochRecord;
use crate::schedule::LrScheduleState;
use crate::{Error, Optimizer, Result};

/// Version of the checkpoint layout written by this crate.
/// 2: `state.json` holds the SHA-256 of the tensor files and the best weights' record.
pub const CHECKPOINT_FORMAT: u32 = 2;

const MODEL_FILE: &str = "model.safetensors";
const OPTIMIZER_FILE: &str = "optimizer.safetensors";
const STATE_FILE: &str = "state.json";
/// The running sum of the weights for `average_from` (`f64`, one tensor per variable).
const AVERAGE_FILE: &str = "average.safetensors";
/// The best epoch's weights, in `run_dir/checkpoints`.
pub const BEST_FILE: &str = "best.safetensors";

pub use invar_io::sha256_hex;

/// The SHA-256 of each tensor file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checksums {
    /// Of `model.safetensors`.
    pub model: String,
    /// Of `optimizer.safetensors`.
    pub optimizer: String,
    /// Of `average.safetensors`, in checkpoints of a run that averages weights (`average_from`)
    /// taken once the averaging has begun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub average: Option<String>,
}

/// Which weights `checkpoints/best.safetensors` must hold: the best epoch and the file's SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BestWeights {
    pub epoch: usize,
    pub sha256: String,
}

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
#[serde(deny_unknown_fields)]
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
    /// The learning-rate schedule's state (absent in checkpoints written before schedules: none).
    #[serde(default)]
    pub lr_schedule: LrScheduleState,
    pub history: Vec<EpochRecord>,
    /// Set when the run ended at this checkpoint.
    pub stopped: Option<StopReason>,
    pub train_config: TrainConfig,
    pub method_config: serde_json::Value,
    /// SHA-256 of the tensor files, checked on load.
    pub checksums: Checksums,
    /// The best weights as of this checkpoint (with `restore_best`).
    pub best_weights: Option<BestWeights>,
    /// Epochs summed into `average.safetensors` as of this checkpoint (with `average_from`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub average_count: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The running sum of the weights at the end of `count` epochs (`train.average_from`), `f64`, in
/// the order of the model's variables.
#[derive(Debug, Clone)]
pub struct WeightSum {
    pub count: usize,
    pub sums: Vec<(String, Tensor)>,
}

impl WeightSum {
    /// Adds the model's current weights (one more epoch) to `sum` (none yet: this is the first).
    pub fn add(sum: Option<WeightSum>, varmap: &VarMap) -> Result<WeightSum> {
        let vars = named_vars(varmap)?;
        let wide = |v: &candle_core::Var| v.as_tensor().to_dtype(DType::F64);
        let (count, sums) = match sum {
            None => (
                1,
                vars.iter()
                    .map(|(k, v)| Ok((k.clone(), wide(v)?)))
                    .collect::<candle_core::Result<Vec<_>>>(),
            ),
            Some(s) => {
                if s.sums.len() != vars.len()
                    || s.sums.iter().zip(&vars).any(|((a, _), (b, _))| a != b)
                {
                    return Err(Error::file(
                        AVERAGE_FILE,
                        "the weight sum's variables are not the model's",
                    ));
                }
                (
                    s.count + 1,
                    s.sums
                        .into_iter()
                        .zip(&vars)
                        .map(|((k, t), (_, v))| Ok((k, (t + wide(v)?)?)))
                        .collect::<candle_core::Result<Vec<_>>>(),
                )
            }
        };
        let sums = sums.map_err(|e| Error::file(AVERAGE_FILE, e))?;
        Ok(WeightSum { count, sums })
    }

    /// The mean weights, in each variable's own dtype.
    pub fn mean(&self, varmap: &VarMap) -> Result<HashMap<String, Tensor>> {
        let vars: HashMap<String, DType> = named_vars(varmap)?
            .into_iter()
            .map(|(k, v)| (k, v.dtype()))
            .collect();
        self.sums
            .iter()
            .map(|(k, t)| {
                let dtype = vars.get(k).copied().unwrap_or(DType::F32);
                Ok((
                    k.clone(),
                    (t / self.count as f64)
                        .and_then(|m| m.to_dtype(dtype))
                        .map_err(|e| Error::file(AVERAGE_FILE, e))?,
                ))
            })
            .collect()
    }
}

/// A checkpoint read completely into memory (nothing applied yet).
#[derive(Debug)]
pub struct Checkpoint {
    pub path: PathBuf,
    pub weights: HashMap<String, Tensor>,
    pub optimizer: HashMap<String, Tensor>,
    pub state: TrainState,
    /// The running weight sum (`train.average_from`), once the averaging has begun.
    pub average: Option<WeightSum>,
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
/// `keep_last` remain, plus `best` if given (invar-io's, shared with EM checkpoints).
pub fn checkpoints_to_remove(
    epochs: &[usize],
    keep_last: usize,
    best: Option<usize>,
) -> Vec<usize> {
    invar_io::checkpoints_to_remove(epochs, keep_last, best)
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

fn weights_bytes(
    varmap: &VarMap,
    path: &Path,
    metadata: Option<HashMap<String, String>>,
) -> Result<Vec<u8>> {
    let tensors: Vec<(String, Tensor)> = named_vars(varmap)?
        .into_iter()
        .map(|(k, v)| (k, v.as_tensor().clone()))
        .collect();
    safetensors::serialize(tensors.iter().map(|(k, t)| (k.as_str(), t)), metadata)
        .map_err(|e| Error::file(path, e))
}

/// Writes the model weights alone to `path` as safetensors, atomically.
pub fn save_weights(varmap: &VarMap, path: &Path) -> Result<()> {
    let bytes = weights_bytes(varmap, path, None)?;
    invar_io::atomic_write(path, |w| w.write_all(&bytes))?;
    Ok(())
}

/// `run_dir/checkpoints/best.safetensors`.
pub fn best_weights_path(run_dir: &Path) -> PathBuf {
    checkpoints_dir(run_dir).join(BEST_FILE)
}

/// Writes the model's weights as the best ones, of `epoch` (in the file's metadata), atomically;
/// returns their record.
pub fn save_best_weights(run_dir: &Path, varmap: &VarMap, epoch: usize) -> Result<BestWeights> {
    let root = checkpoints_dir(run_dir);
    std::fs::create_dir_all(&root).map_err(|e| Error::file(&root, e))?;
    let path = best_weights_path(run_dir);
    let metadata = HashMap::from([("epoch".to_string(), epoch.to_string())]);
    let bytes = weights_bytes(varmap, &path, Some(metadata))?;
    invar_io::atomic_write(&path, |w| w.write_all(&bytes))?;
    Ok(BestWeights {
        epoch,
        sha256: sha256_hex(&bytes),
    })
}

/// Reads `checkpoints/best.safetensors` and checks it against `expected` (its SHA-256 and the
/// epoch in its metadata): the weights of the best epoch, or an error naming the file.
pub fn load_best_weights(
    run_dir: &Path,
    expected: &BestWeights,
    device: &Device,
) -> Result<HashMap<String, Tensor>> {
    let path = best_weights_path(run_dir);
    let bytes = std::fs::read(&path).map_err(|e| {
        Error::file(
            &path,
            format!(
                "the best weights (epoch {}) cannot be read: {e}",
                expected.epoch
            ),
        )
    })?;
    verify_sha256(&path, &bytes, &expected.sha256)?;
    let (_, meta) =
        safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| Error::file(&path, e))?;
    let epoch = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get("epoch"))
        .and_then(|e| e.parse::<usize>().ok());
    if epoch != Some(expected.epoch) {
        return Err(Error::file(
            &path,
            format!(
                "holds the weights of epoch {epoch:?}, early stopping's best is epoch {}",
                expected.epoch
            ),
        ));
    }
    candle_core::safetensors::load_buffer(&bytes, device).map_err(|e| Error::file(&path, e))
}

fn verify_sha256(path: &Path, bytes: &[u8], expected: &str) -> Result<()> {
    let found = sha256_hex(bytes);
    if found != expected {
        return Err(Error::file(
            path,
            format!(
                "checksum mismatch: SHA-256 {found}, state.json recorded {expected} (the file was \
                 changed or damaged after it was written)"
            ),
        ));
    }
    Ok(())
}

/// Writes a complete checkpoint for `state.epoch` and returns its directory.
pub fn save_checkpoint(
    run_dir: &Path,
    varmap: &VarMap,
    optimizer: &Optimizer,
    state: &TrainState,
    average: Option<&WeightSum>,
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
        let model_path = tmp.join(MODEL_FILE);
        let model = weights_bytes(varmap, &model_path, None)?;
        invar_io::atomic_write(&model_path, |w| w.write_all(&model))?;
        let opt_path = tmp.join(OPTIMIZER_FILE);
        let opt = safetensors_bytes(&opt_path, optimizer.state_tensors())?;
        invar_io::atomic_write(&opt_path, |w| w.write_all(&opt))?;
        let average = match average {
            Some(sum) => {
                let path = tmp.join(AVERAGE_FILE);
                let bytes = safetensors_bytes(&path, sum.sums.clone())?;
                invar_io::atomic_write(&path, |w| w.write_all(&bytes))?;
                Some((sha256_hex(&bytes), sum.count))
            }
            None => None,
        };
        let mut state = state.clone();
        state.checksums = Checksums {
            model: sha256_hex(&model),
            optimizer: sha256_hex(&opt),
            average: average.as_ref().map(|(h, _)| h.clone()),
        };
        state.average_count = average.map_or(0, |(_, n)| n);
        invar_io::write_json(tmp.join(STATE_FILE), &state)?;
        if final_path.exists() {
            // An older checkpoint of the same epoch (from a run that was resumed before it): replace it.
            remove_checkpoint_dir(&final_path)?;
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

/// Deletes a checkpoint directory so that a kill midway cannot leave a half-deleted `ckpt-N`
/// that looks like a checkpoint: it is renamed to a hidden temporary first.
pub fn remove_checkpoint_dir(path: &Path) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let doomed = path.with_file_name(format!(".{name}.tmp-del-{}", std::process::id()));
    std::fs::rename(path, &doomed).map_err(|e| Error::file(path, e))?;
    std::fs::remove_dir_all(&doomed).map_err(|e| Error::file(&doomed, e))
}

fn read_safetensors(path: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    let bytes = std::fs::read(path).map_err(|e| Error::file(path, e))?;
    candle_core::safetensors::load_buffer(&bytes, device).map_err(|e| Error::file(path, e))
}

fn read_verified(path: &Path, sha256: &str, device: &Device) -> Result<HashMap<String, Tensor>> {
    let bytes = std::fs::read(path).map_err(|e| Error::file(path, e))?;
    verify_sha256(path, &bytes, sha256)?;
    candle_core::safetensors::load_buffer(&bytes, device).map_err(|e| Error::file(path, e))
}

/// Reads a checkpoint completely: every file present, parseable, and hashing to the SHA-256 that
/// `state.json` recorded.
pub fn load_checkpoint(path: &Path, device: &Device) -> Result<Checkpoint> {
    let state_path = path.join(STATE_FILE);
    let value: serde_json::Value = invar_io::read_json(&state_path)?;
    let format = value.get("format").and_then(serde_json::Value::as_u64);
    if format != Some(u64::from(CHECKPOINT_FORMAT)) {
        return Err(Error::file(
            &state_path,
            format!(
                "checkpoint format {} (this build reads {CHECKPOINT_FORMAT})",
                format.map_or("missing".into(), |f| f.to_string())
            ),
        ));
    }
    let state: TrainState =
        serde_json::from_value(value).map_err(|e| Error::file(&state_path, e))?;
    if state.format != CHECKPOINT_FORMAT {
        return Err(Error::file(
            &state_path,
            format!(
                "checkpoint format {} (this build reads {CHECKPOINT_FORMAT})",
                state.format
            ),
        ));
    }
    let weights = read_verified(&path.join(MODEL_FILE), &state.checksums.model, device)?;
    let optimizer = read_verified(
        &path.join(OPTIMIZER_FILE),
        &state.checksums.optimizer,
        device,
    )?;
    let average = match &state.checksums.average {
        Some(sha) => {
            let file = path.join(AVERAGE_FILE);
            let tensors = read_verified(&file, sha, device)?;
            if state.average_count == 0 {
                return Err(Error::file(
                    &state_path,
                    "records a weight sum of 0 epochs (average_count)",
                ));
            }
            // In the model's variable order (sorted names, as `named_vars` gives them).
            let mut sums: Vec<(String, Tensor)> = tensors.into_iter().collect();
            sums.sort_by(|a, b| a.0.cmp(&b.0));
            Some(WeightSum {
                count: state.average_count,
                sums,
            })
        }
        None => None,
    };
    Ok(Checkpoint {
        path: path.to_path_buf(),
        weights,
        optimizer,
        state,
        average,
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
