//! EM checkpoints, so that UBM and T-matrix training resume exactly: after every EM iteration,
//! `run_dir/checkpoints/em-{iteration:04}/` holds `model.safetensors` (the model the next
//! iteration starts from, the same bytes the final model file would have) and `state.json`
//! (iterations made, the stage of a split-grown UBM, the history so far, the run's settings and
//! the SHA-256 of `model.safetensors`). Nothing else is needed: after the seeded initialisation
//! every iteration is a deterministic function of the model and the data (the E-step sums in a
//! fixed order), so the generator is not part of the state.
//!
//! A checkpoint is written into a hidden temporary directory that is renamed into place last, so
//! an `em-N` directory is complete or absent; the newest [`KEEP_LAST`] are kept. On resume, the
//! newest one that verifies is used (a damaged one is skipped with a warning naming it); a
//! resume whose settings differ from the checkpoint's is refused naming the dotted keys, with
//! nothing in the folder touched. The iteration count may grow (a finished run extends), never
//! fall below the iterations already made.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::ivector::{IvectorConfig, IvectorExtractor, IvectorIteration};
use crate::train::{EmConfig, EmStage, EmState};
use crate::{DiagGmm, Error, Result};

/// Version of the EM checkpoint layout written by this crate.
pub const EM_CHECKPOINT_FORMAT: u32 = 1;
/// How many checkpoints a run keeps (the newest).
pub const KEEP_LAST: usize = 2;

const MODEL_FILE: &str = "model.safetensors";
const STATE_FILE: &str = "state.json";
const PREFIX: &str = "em-";

/// Which model a checkpoint holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum ModelKind {
    Gmm,
    Ivector,
}

/// Everything in `state.json`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct State<H> {
    format: u32,
    model: ModelKind,
    /// EM iterations made (all of them: a split-grown UBM's growing iterations count).
    iteration: usize,
    /// Where a UBM's EM stands (absent for an i-vector extractor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stage: Option<EmStage>,
    /// One report per iteration made.
    history: Vec<H>,
    /// The run's settings, compared on resume.
    settings: serde_json::Value,
    /// SHA-256 of `model.safetensors`, checked on load.
    sha256: String,
}

/// The checkpoints of one run: where they go and the settings they are tied to.
#[derive(Debug, Clone)]
pub struct EmCheckpoints {
    dir: PathBuf,
    settings: serde_json::Value,
}

impl EmCheckpoints {
    /// Checkpoints in `run_dir/checkpoints` of a run with `settings` (everything a resume must
    /// repeat: the configuration, the data, the UBM, ...; an iteration count inside it, the key
    /// `max_iters` or `iters`, may change).
    pub fn new(run_dir: &Path, settings: serde_json::Value) -> Self {
        EmCheckpoints {
            dir: run_dir.join("checkpoints"),
            settings,
        }
    }

    /// `run_dir/checkpoints`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The checkpoint directories present (`em-N`), oldest first.
    pub fn list(&self) -> Result<Vec<(usize, PathBuf)>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(file_err(&self.dir, format!("cannot list: {e}"))),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| file_err(&self.dir, format!("cannot list: {e}")))?;
            let name = entry.file_name();
            let Some(n) = name
                .to_str()
                .and_then(|n| n.strip_prefix(PREFIX))
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            if entry.path().is_dir() {
                out.push((n, entry.path()));
            }
        }
        out.sort_by_key(|(n, _)| *n);
        Ok(out)
    }

    /// Saves a UBM's EM state after an iteration; returns the checkpoint directory.
    pub fn save_gmm(&self, state: &EmState) -> Result<PathBuf> {
        let iteration = state.history.len();
        self.save(
            iteration,
            |path| state.gmm.to_safetensors(path),
            |sha256| State {
                format: EM_CHECKPOINT_FORMAT,
                model: ModelKind::Gmm,
                iteration,
                stage: Some(state.stage),
                history: state.history.clone(),
                settings: self.settings.clone(),
                sha256,
            },
        )
    }

    /// Saves an i-vector extractor after `history.len()` iterations.
    pub fn save_ivector(
        &self,
        model: &IvectorExtractor,
        history: &[IvectorIteration],
    ) -> Result<PathBuf> {
        let iteration = history.len();
        self.save(
            iteration,
            |path| model.to_safetensors(path),
            |sha256| State {
                format: EM_CHECKPOINT_FORMAT,
                model: ModelKind::Ivector,
                iteration,
                stage: None,
                history: history.to_vec(),
                settings: self.settings.clone(),
                sha256,
            },
        )
    }

    /// The UBM EM state of the newest good checkpoint, `None` if there is none (start afresh).
    /// Damaged checkpoints are skipped with a warning; other settings than this run's, or more
    /// full-size iterations made than `cfg.max_iters`, refuse the resume.
    pub fn resume_gmm(&self, cfg: &EmConfig) -> Result<Option<(PathBuf, EmState)>> {
        let found = self.newest_good(ModelKind::Gmm, "max_iters", |bytes, path| {
            DiagGmm::from_safetensors(bytes, path, true)
        })?;
        let Some((path, gmm, state)) = found else {
            return Ok(None);
        };
        let stage = state.stage.ok_or_else(|| {
            file_err(&path.join(STATE_FILE), "a UBM checkpoint without its stage")
        })?;
        if let EmStage::Full { done } = stage {
            if done > cfg.max_iters {
                return Err(Error::ResumeShorter {
                    path,
                    done,
                    asked: cfg.max_iters,
                });
            }
        }
        self.remove_stale_temporaries()?;
        let em = EmState {
            gmm,
            history: state.history,
            stage,
        };
        Ok(Some((path, em)))
    }

    /// The i-vector extractor and history of the newest good checkpoint for `ubm`, `None` if
    /// there is none; as [`EmCheckpoints::resume_gmm`], with `cfg.iters` for the count.
    #[allow(clippy::type_complexity)] // the three things a resume needs
    pub fn resume_ivector(
        &self,
        ubm: &DiagGmm,
        cfg: &IvectorConfig,
    ) -> Result<Option<(PathBuf, IvectorExtractor, Vec<IvectorIteration>)>> {
        let found = self.newest_good(ModelKind::Ivector, "iters", |bytes, path| {
            IvectorExtractor::from_safetensors(bytes, path, ubm)
        })?;
        let Some((path, model, state)) = found else {
            return Ok(None);
        };
        if state.iteration > cfg.iters {
            return Err(Error::ResumeShorter {
                path,
                done: state.iteration,
                asked: cfg.iters,
            });
        }
        self.remove_stale_temporaries()?;
        Ok(Some((path, model, state.history)))
    }

    fn save<H: Serialize>(
        &self,
        iteration: usize,
        model_bytes: impl FnOnce(&Path) -> Result<Vec<u8>>,
        state: impl FnOnce(String) -> State<H>,
    ) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| file_err(&self.dir, format!("cannot create: {e}")))?;
        let final_path = self.dir.join(format!("{PREFIX}{iteration:04}"));
        let tmp = self.dir.join(format!(
            ".{PREFIX}{iteration:04}.tmp-{}",
            std::process::id()
        ));
        if tmp.exists() {
            remove_dir(&tmp)?;
        }
        std::fs::create_dir_all(&tmp).map_err(|e| file_err(&tmp, format!("cannot create: {e}")))?;
        let result = (|| -> Result<()> {
            let model_path = tmp.join(MODEL_FILE);
            let bytes = model_bytes(&final_path.join(MODEL_FILE))?;
            invar_io::atomic_write(&model_path, |w| w.write_all(&bytes))?;
            invar_io::write_json(tmp.join(STATE_FILE), &state(invar_io::sha256_hex(&bytes)))?;
            if final_path.exists() {
                // A checkpoint of the same iteration from before a resume that went back past it.
                remove_checkpoint_dir(&final_path)?;
            }
            std::fs::rename(&tmp, &final_path)
                .map_err(|e| file_err(&final_path, format!("cannot rename into place: {e}")))?;
            if let Ok(dir) = std::fs::File::open(&self.dir) {
                let _ = dir.sync_all(); // make the rename durable
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        result?;
        let present: Vec<usize> = self.list()?.iter().map(|(n, _)| *n).collect();
        for n in invar_io::checkpoints_to_remove(&present, KEEP_LAST, None) {
            remove_checkpoint_dir(&self.dir.join(format!("{PREFIX}{n:04}")))?;
        }
        Ok(final_path)
    }

    /// The newest checkpoint of `kind` that loads and verifies, with its model parsed by `parse`;
    /// refused if its settings differ from this run's (but for `may_change`).
    fn newest_good<M, H: DeserializeOwned>(
        &self,
        kind: ModelKind,
        may_change: &str,
        parse: impl Fn(&[u8], &Path) -> Result<M>,
    ) -> Result<Option<(PathBuf, M, State<H>)>> {
        for (_, path) in self.list()?.into_iter().rev() {
            match load::<M, H>(&path, kind, &parse) {
                Ok((model, state)) => {
                    let differences = invar_io::settings_differences(
                        &state.settings,
                        &self.settings,
                        &[may_change],
                    );
                    if !differences.is_empty() {
                        return Err(Error::ResumeMismatch { path, differences });
                    }
                    tracing::info!(
                        "resuming from {} (iteration {})",
                        path.display(),
                        state.iteration
                    );
                    return Ok(Some((path, model, state)));
                }
                Err(e) => tracing::warn!("skipping checkpoint {}: {e}", path.display()),
            }
        }
        Ok(None)
    }

    /// Removes checkpoint directories a killed run left half-written (`.em-*.tmp-*`).
    fn remove_stale_temporaries(&self) -> Result<()> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&format!(".{PREFIX}")) && name.contains(".tmp-") {
                remove_dir(&entry.path())?;
            }
        }
        Ok(())
    }
}

/// Reads one checkpoint completely: `state.json` of this format and kind, `model.safetensors`
/// hashing to the recorded SHA-256 and parsing as a model.
fn load<M, H: DeserializeOwned>(
    dir: &Path,
    kind: ModelKind,
    parse: &impl Fn(&[u8], &Path) -> Result<M>,
) -> Result<(M, State<H>)> {
    let state_path = dir.join(STATE_FILE);
    let value: serde_json::Value = invar_io::read_json(&state_path)?;
    let format = value.get("format").and_then(serde_json::Value::as_u64);
    if format != Some(u64::from(EM_CHECKPOINT_FORMAT)) {
        return Err(file_err(
            &state_path,
            format!(
                "checkpoint format {} (this build reads {EM_CHECKPOINT_FORMAT})",
                format.map_or("missing".into(), |f| f.to_string())
            ),
        ));
    }
    let state: State<H> =
        serde_json::from_value(value).map_err(|e| file_err(&state_path, e.to_string()))?;
    if state.model != kind {
        return Err(file_err(
            &state_path,
            format!("holds a {:?} checkpoint, expected {kind:?}", state.model),
        ));
    }
    if state.history.len() != state.iteration {
        return Err(file_err(
            &state_path,
            format!(
                "iteration {} with {} history entries",
                state.iteration,
                state.history.len()
            ),
        ));
    }
    let model_path = dir.join(MODEL_FILE);
    let bytes = std::fs::read(&model_path)
        .map_err(|e| file_err(&model_path, format!("cannot read: {e}")))?;
    let found = invar_io::sha256_hex(&bytes);
    if found != state.sha256 {
        return Err(file_err(
            &model_path,
            format!(
                "checksum mismatch: SHA-256 {found}, state.json recorded {} (the file was \
                 changed or damaged after it was written)",
                state.sha256
            ),
        ));
    }
    Ok((parse(&bytes, &model_path)?, state))
}

/// Deletes a checkpoint directory so that a kill midway cannot leave a half-deleted `em-N`: it is
/// renamed to a hidden temporary first.
fn remove_checkpoint_dir(path: &Path) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let doomed = path.with_file_name(format!(".{name}.tmp-del-{}", std::process::id()));
    std::fs::rename(path, &doomed).map_err(|e| file_err(path, format!("cannot remove: {e}")))?;
    remove_dir(&doomed)
}

fn remove_dir(path: &Path) -> Result<()> {
    std::fs::remove_dir_all(path).map_err(|e| file_err(path, format!("cannot remove: {e}")))
}

fn file_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::File {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}
