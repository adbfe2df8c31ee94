//! The native half of the `invar` Python package (`invar._invar`). Each function is a thin binding
//! of the library call the matching `invar` command makes: arrays in and out through numpy, long
//! calls without the GIL, and invar's errors as Python exceptions carrying invar's message. The
//! Python half (`python/invar/__init__.py`) shapes results into dicts and classes.

mod models;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use invar_audio::{Audio, ChannelSelect, FeatureKind, Frontend, FrontendConfig, ReadOptions};
use invar_data::{FeatureSet, Layout};
use invar_eval::abx::{
    self as abx_lib, AbxConfig, AbxMode, AbxPlan, Convention, FrameTiming, ItemFrames, ItemTiming,
};
use invar_eval::{PairMetric, Trial, VerifyConfig};
use invar_gmm::{DiagGmm, EmConfig, GmmMeta, MapConfig};
use invar_io::Matrix;
use invar_ops::FrameDistance;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyUntypedArrayMethods,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

create_exception!(
    invar,
    InvarError,
    PyException,
    "An error reported by invar (bad data, a degenerate evaluation, a failed computation); the message \
     is invar's, naming the file and the place in it."
);

/// invar's message with its causes, as the command line prints them (`a: b: c`).
fn message(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// An invar error as a Python exception: IO failures become `OSError` (`FileNotFoundError` for a
/// missing file), everything else `InvarError`, each with invar's whole message.
fn to_py(e: &(dyn std::error::Error + 'static)) -> PyErr {
    let text = message(e);
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return if io.kind() == std::io::ErrorKind::NotFound {
                PyFileNotFoundError::new_err(text)
            } else {
                PyOSError::new_err(text)
            };
        }
        cause = c.source();
    }
    InvarError::new_err(text)
}

trait OrPy<T> {
    /// Maps a library error to the Python exception for it.
    fn py(self) -> PyResult<T>;
    /// Maps a library error to `ValueError` (the caller passed a bad value).
    fn value(self) -> PyResult<T>;
}

impl<T, E: std::error::Error + 'static> OrPy<T> for Result<T, E> {
    fn py(self) -> PyResult<T> {
        self.map_err(|e| to_py(&e))
    }
    fn value(self) -> PyResult<T> {
        self.map_err(|e| PyValueError::new_err(message(&e)))
    }
}

/// Parses a name (`"mfcc"`, `"angular"`, `"timit"`) with the library's own parser.
fn parse<T>(what: &str, s: &str) -> PyResult<T>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    s.parse::<T>()
        .map_err(|e| PyValueError::new_err(format!("{what} `{s}`: {e}")))
}

/// A C-contiguous float32 frames × dims array as a [`Matrix`] (one copy: the library owns its rows).
fn matrix(x: &PyReadonlyArray2<'_, f32>, what: &str) -> PyResult<Matrix> {
    let (rows, cols) = (x.shape()[0], x.shape()[1]);
    let data = x.as_slice().map_err(|_| {
        PyValueError::new_err(format!(
            "{what}: expected a C-contiguous float32 array (numpy.ascontiguousarray(x, dtype=numpy.float32))"
        ))
    })?;
    Matrix::new(rows, cols, data.to_vec()).value()
}

fn to_array<'py>(py: Python<'py>, m: Matrix) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let (rows, cols) = (m.rows, m.cols);
    m.data
        .into_pyarray(py)
        .reshape([rows, cols])
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Overlays `overrides` (a JSON object) on `base`, recursively: nested configs keep the fields not given.
fn overlay(base: &mut serde_json::Value, overrides: serde_json::Value) {
    match (base, overrides) {
        (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => overlay(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// `T::default()` (or `base`) with the JSON object `overrides` laid over it; unknown fields are errors.
fn config_with<T>(base: T, overrides: Option<&str>, what: &str) -> PyResult<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let Some(overrides) = overrides else {
        return Ok(base);
    };
    let mut value =
        serde_json::to_value(&base).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))?;
    let o: serde_json::Value = serde_json::from_str(overrides)
        .map_err(|e| PyValueError::new_err(format!("{what}: {e}")))?;
    overlay(&mut value, o);
    serde_json::from_value(value).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

/// Decodes an audio file (any format invar reads) into mono float32 samples and their rate.
#[pyfunction]
#[pyo3(signature = (path, channel=None, rate=None))]
fn load_audio<'py>(
    py: Python<'py>,
    path: PathBuf,
    channel: Option<usize>,
    rate: Option<u32>,
) -> PyResult<(Bound<'py, PyArray1<f32>>, u32)> {
    let options = ReadOptions {
        channel: channel.map_or(ChannelSelect::Mix, ChannelSelect::Index),
        target_rate: rate,
        resample: true,
    };
    let audio = py
        .allow_threads(|| invar_audio::read_audio(&path, &options))
        .py()?;
    Ok((audio.samples.into_pyarray(py), audio.sample_rate))
}

/// The front-end configuration `invar features --kind KIND` uses, with `overrides` (JSON) laid over it.
#[pyfunction]
#[pyo3(signature = (kind, overrides=None))]
fn frontend_config(kind: &str, overrides: Option<&str>) -> PyResult<String> {
    let kind: FeatureKind = parse("feature kind", kind)?;
    let mut config = config_with(
        FrontendConfig::for_kind(kind),
        overrides,
        "front-end config",
    )?;
    config.kind = kind;
    config.validate().value()?;
    serde_json::to_string(&config).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Features of one signal, as `invar features` computes them (resampled to the front-end's rate first
/// unless `resample` is false).
#[pyfunction]
#[pyo3(signature = (signal, rate, config, resample=true))]
fn features<'py>(
    py: Python<'py>,
    signal: PyReadonlyArray1<'py, f32>,
    rate: u32,
    config: &str,
    resample: bool,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let config: FrontendConfig =
        serde_json::from_str(config).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let samples = signal.as_slice().map_err(|_| {
        PyValueError::new_err("signal: expected a contiguous float32 array".to_string())
    })?;
    let m = py
        .allow_threads(|| -> Result<Matrix, invar_audio::Error> {
            let audio = if rate != config.sample_rate && resample {
                Audio {
                    samples: invar_audio::resample(samples, rate, config.sample_rate)?,
                    sample_rate: config.sample_rate,
                }
            } else {
                Audio {
                    samples: samples.to_vec(),
                    sample_rate: rate,
                }
            };
            Frontend::new(&config)?.compute(&audio)
        })
        .py()?;
    to_array(py, m)
}

/// The corpus at `path` read in `layout`, as JSON (utterances with id, speaker, split, phones, words).
#[pyfunction]
fn read_corpus(py: Python<'_>, path: PathBuf, layout: &str) -> PyResult<String> {
    let layout: Layout = parse("corpus layout", layout)?;
    let corpus = py
        .allow_threads(|| invar_data::read_corpus(layout, &path))
        .py()?;
    serde_json::to_string(&corpus).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A dict of id → 2-D float32 array as matrices, in the dict's order; an error names the entry.
fn dict_matrices(dict: &Bound<'_, PyDict>) -> PyResult<Vec<(String, Matrix)>> {
    let mut out = Vec::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        let id: String = k.extract()?;
        let x: PyReadonlyArray2<'_, f32> = v.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "features[{id:?}]: expected a 2-D float32 array (frames × dims)"
            ))
        })?;
        let m = matrix(&x, &format!("features[{id:?}]"))?;
        out.push((id, m));
    }
    Ok(out)
}

/// Where ABX features come from: a feature-set folder, or arrays by file id.
enum AbxSource {
    Set(FeatureSet),
    Arrays(HashMap<String, Matrix>),
}

/// ABX error as `invar eval abx` computes it; returns the results JSON (one result per mode).
#[pyfunction]
#[pyo3(signature = (features, item, distance=None, convention="zs2015", mode="both", hop_ms=None, win_ms=None, progress=false, max_size_group=None, max_x_across=None, seed=0, frames="centre"))]
fn abx(
    py: Python<'_>,
    features: &Bound<'_, PyAny>,
    item: PathBuf,
    distance: Option<&str>,
    convention: &str,
    mode: &str,
    hop_ms: Option<f64>,
    win_ms: Option<f64>,
    progress: bool,
    max_size_group: Option<usize>,
    max_x_across: Option<usize>,
    seed: u64,
    frames: &str,
) -> PyResult<String> {
    let distance: Option<FrameDistance> = distance.map(|d| parse("distance", d)).transpose()?;
    let frames: ItemFrames = parse("frames", frames)?;
    let convention: Convention = parse("convention", convention)?;
    let modes = match mode {
        "both" => vec![AbxMode::Within, AbxMode::Across],
        m => vec![parse::<AbxMode>("mode", m)?],
    };
    let source = if let Ok(dict) = features.downcast::<PyDict>() {
        AbxSource::Arrays(dict_matrices(dict)?.into_iter().collect())
    } else {
        let dir: PathBuf = features.extract().map_err(|_| {
            PyValueError::new_err(
                "features: expected a dict of id → array or a feature-set folder".to_string(),
            )
        })?;
        AbxSource::Set(FeatureSet::open(&dir).py()?)
    };
    // A folder's timing comes from its config.json as `invar eval abx` reads it; bare arrays carry
    // none, so their timing must be given: an assumed 10 ms would score 20 ms features wrongly.
    let timing =
        match &source {
            AbxSource::Set(set) => {
                set.frame_timing(hop_ms, win_ms)
                    .map_err(|e| PyValueError::new_err(format!("{e} (hop_ms, win_ms)")))?
                    .0
            }
            AbxSource::Arrays(_) => match (hop_ms, win_ms) {
                (Some(hop), Some(win)) => FrameTiming {
                    hop_s: hop / 1000.0,
                    win_s: win / 1000.0,
                },
                _ => return Err(PyValueError::new_err(
                    "abx on a dict of arrays needs hop_ms and win_ms (the frame shift and length \
                     the features were computed with, e.g. hop_ms=10, win_ms=25 for invar's \
                     default front-end): arrays carry no frame timing",
                )),
            },
        };
    let results = py
        .allow_threads(|| -> invar_eval::Result<Vec<abx_lib::AbxResult>> {
            let missing = |file: &str, dir: &std::path::Path| invar_eval::Error::MissingFeatures {
                file: file.to_string(),
                dir: dir.to_path_buf(),
            };
            let dict = std::path::Path::new("<features dict>");
            let load_error = |file: &str, e: invar_data::Error| match e {
                invar_data::Error::File(f) => invar_eval::Error::File(f),
                other => invar_eval::Error::LoadFeatures {
                    file: file.to_string(),
                    reason: other.to_string(),
                },
            };
            // As `invar eval abx`: planned from the shapes (with max_size_group, the draw too),
            // scanned once a file at a time, then read and scored a group of contexts at a time.
            let plan = AbxPlan::from_item_file(
                &item,
                ItemTiming { timing, frames },
                max_size_group,
                seed,
                |file| match &source {
                    AbxSource::Set(set) => set
                        .find(file)
                        .map(|e| (e.frames, e.dims))
                        .ok_or_else(|| missing(file, set.dir())),
                    AbxSource::Arrays(arrays) => arrays
                        .get(file)
                        .map(|m| m.shape())
                        .ok_or_else(|| missing(file, dict)),
                },
            )?;
            let summary = plan.scan(|file| match &source {
                AbxSource::Set(set) => {
                    let entry = set.find(file).ok_or_else(|| missing(file, set.dir()))?;
                    set.load(entry).map_err(|e| load_error(file, e))
                }
                AbxSource::Arrays(arrays) => {
                    arrays.get(file).cloned().ok_or_else(|| missing(file, dict))
                }
            })?;
            // As `invar eval abx` without --distance: chosen from the frames.
            let distance = distance.unwrap_or_else(|| summary.default_distance().0);
            let configs: Vec<AbxConfig> = modes
                .into_iter()
                .map(|mode| AbxConfig {
                    mode,
                    convention,
                    distance,
                    timing,
                    max_size_group,
                    max_x_across,
                    seed,
                })
                .collect();
            for c in &configs {
                c.validate()?;
            }
            let ds = plan.dataset();
            let total: u64 = configs
                .iter()
                .map(|c| abx_lib::work_unit_count(ds, c) as u64)
                .sum();
            let done = AtomicU64::new(0);
            let tick = || {
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if progress && (d % (total / 100).max(1) == 0 || d == total) {
                    eprint!("\rABX: {d}/{total} units");
                    if d == total {
                        eprintln!();
                    }
                }
            };
            let max_frames = (8usize << 20) / (4 * ds.dim.max(1));
            let results = abx_lib::evaluate_planned(
                &plan,
                &summary,
                &configs,
                max_frames,
                |file, rows| match &source {
                    AbxSource::Set(set) => {
                        let entry = set.find(file).ok_or_else(|| missing(file, set.dir()))?;
                        set.load_rows(entry, rows).map_err(|e| load_error(file, e))
                    }
                    AbxSource::Arrays(arrays) => {
                        let m = arrays.get(file).ok_or_else(|| missing(file, dict))?;
                        let data = m
                            .data
                            .get(rows.start * m.cols..rows.end * m.cols)
                            .ok_or_else(|| invar_eval::Error::LoadFeatures {
                                file: file.to_string(),
                                reason: format!(
                                    "rows {}..{} of {} frames",
                                    rows.start, rows.end, m.rows
                                ),
                            })?;
                        Ok(Matrix::new(rows.len(), m.cols, data.to_vec())?)
                    }
                },
                &tick,
            )?;
            Ok(results)
        })
        .py()?;
    serde_json::to_string(&results).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Splits scores by label into (target, nontarget).
fn split_scores(scores: &[f32], labels: &[bool]) -> PyResult<(Vec<f32>, Vec<f32>)> {
    if scores.len() != labels.len() {
        return Err(PyValueError::new_err(format!(
            "{} scores but {} labels",
            scores.len(),
            labels.len()
        )));
    }
    let mut target = Vec::new();
    let mut nontarget = Vec::new();
    for (&s, &l) in scores.iter().zip(labels) {
        if l {
            target.push(s)
        } else {
            nontarget.push(s)
        }
    }
    Ok((target, nontarget))
}

/// Kaldi's `ivector-compute-eer` on scores (higher = target): (EER in [0, 1], threshold score).
#[pyfunction]
fn eer(scores: Vec<f32>, labels: Vec<bool>) -> PyResult<(f64, f32)> {
    let (target, nontarget) = split_scores(&scores, &labels)?;
    invar_eval::verify::eer(&target, &nontarget).py()
}

/// Kaldi's `compute_min_dcf.py`: (normalised minDCF, threshold score).
#[pyfunction]
#[pyo3(signature = (scores, labels, p_target=0.01, c_miss=1.0, c_fa=1.0))]
fn min_dcf(
    scores: Vec<f32>,
    labels: Vec<bool>,
    p_target: f64,
    c_miss: f64,
    c_fa: f64,
) -> PyResult<(f64, f32)> {
    invar_eval::verify::min_dcf(&scores, &labels, p_target, c_miss, c_fa).py()
}

/// Speaker verification as `invar eval verify` scores it; returns the report JSON for each metric.
#[pyfunction]
#[pyo3(signature = (embeddings, speakers, trials=None, ids=None, metrics=vec!["angular".to_string(), "euclidean".to_string()]))]
fn verify(
    py: Python<'_>,
    embeddings: PyReadonlyArray2<'_, f32>,
    speakers: Vec<String>,
    trials: Option<PathBuf>,
    ids: Option<Vec<String>>,
    metrics: Vec<String>,
) -> PyResult<String> {
    let emb = matrix(&embeddings, "embeddings")?;
    if speakers.len() != emb.rows {
        return Err(PyValueError::new_err(format!(
            "{} speakers for {} embedding rows",
            speakers.len(),
            emb.rows
        )));
    }
    let metrics = metrics
        .iter()
        .map(|m| parse::<PairMetric>("metric", m))
        .collect::<PyResult<Vec<_>>>()?;
    let trials: Vec<Trial> = match &trials {
        Some(path) => {
            let ids = ids.ok_or_else(|| {
                PyValueError::new_err("trials need ids (the utterance id of each embedding row)")
            })?;
            if ids.len() != emb.rows {
                return Err(PyValueError::new_err(format!(
                    "{} ids for {} embedding rows",
                    ids.len(),
                    emb.rows
                )));
            }
            let index: HashMap<String, usize> = ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.clone(), i))
                .collect();
            invar_eval::read_trials(path, &index).py()?
        }
        None => {
            invar_eval::bounded_pairs(&speakers, &invar_eval::TrialCaps::default())
                .py()?
                .trials
        }
    };
    let reports = py
        .allow_threads(|| -> invar_eval::Result<Vec<invar_eval::VerifyReport>> {
            metrics
                .iter()
                .map(|&metric| {
                    let distances = invar_eval::trial_distances(&emb, &trials, metric)?;
                    let config = VerifyConfig {
                        metric,
                        ..VerifyConfig::default()
                    };
                    invar_eval::verify(&distances, &trials, &config)
                })
                .collect()
        })
        .py()?;
    serde_json::to_string(&reports).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Where term discovery's features come from: a feature-set folder, or arrays by utterance id.
/// The utterances, and from a feature set its frame timing and energy-gate dimension.
type UtdInput = (
    Vec<invar_utd::UtteranceFeatures>,
    Option<FrameTiming>,
    Option<usize>,
);

fn utd_utterances(features: &Bound<'_, PyAny>) -> PyResult<UtdInput> {
    if let Ok(dict) = features.downcast::<PyDict>() {
        let utts = dict_matrices(dict)?
            .into_iter()
            .map(|(id, frames)| invar_utd::UtteranceFeatures {
                id,
                speaker: None,
                frames,
            })
            .collect();
        Ok((utts, None, None))
    } else {
        let dir: PathBuf = features.extract().map_err(|_| {
            PyValueError::new_err(
                "features: expected a dict of id → array or a feature-set folder".to_string(),
            )
        })?;
        let set = FeatureSet::open(&dir).py()?;
        let timing = set.timing();
        let energy = invar_utd::energy_dim_of(set.dir());
        Ok((invar_utd::load_featureset(&set).py()?, timing, energy))
    }
}

/// Unsupervised term discovery as `invar utd` runs it; returns the classes as JSON.
#[pyfunction]
#[pyo3(signature = (features, config=None))]
fn utd(py: Python<'_>, features: &Bound<'_, PyAny>, config: Option<&str>) -> PyResult<String> {
    let (mut utts, timing, energy) = utd_utterances(features)?;
    let mut base = invar_utd::UtdConfig::default();
    if let Some(t) = timing {
        base.timing = t;
    }
    // As `invar utd`: the energy gate on c0 of MFCC with energy (a config may say otherwise).
    base.silence.energy_dim = energy;
    let cfg = config_with(base, config, "UTD config")?;
    cfg.validate().value()?;
    let classes = py
        .allow_threads(|| -> invar_utd::Result<Vec<invar_data::Class>> {
            // As `invar utd`: the frames move into the search's buffer, held once, not twice.
            let discovery = invar_utd::discover_taking(&mut utts, &cfg, &|_, _, _| {})?;
            Ok(invar_utd::to_classes(&discovery, &utts, &cfg.timing))
        })
        .py()?;
    serde_json::to_string(&classes).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A ZRTools class file (as `invar utd` writes), as JSON.
#[pyfunction]
fn read_classes(path: PathBuf) -> PyResult<String> {
    let classes = invar_data::read_classes(&path).py()?;
    serde_json::to_string(&classes).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A diagonal-covariance GMM / UBM, trained and applied as `invar gmm` does.
#[pyclass(module = "invar")]
struct Gmm {
    config: EmConfig,
    model: Option<DiagGmm>,
    history: Vec<invar_gmm::IterationReport>,
}

impl Gmm {
    fn model(&self) -> PyResult<&DiagGmm> {
        self.model.as_ref().ok_or_else(|| {
            PyValueError::new_err("this GMM is not fitted: call fit() or GMM.load()")
        })
    }
}

#[pymethods]
impl Gmm {
    #[new]
    #[pyo3(signature = (components, config=None))]
    fn new(components: usize, config: Option<&str>) -> PyResult<Self> {
        let mut config = config_with(EmConfig::default(), config, "EM config")?;
        config.components = components;
        config.validate().value()?;
        Ok(Gmm {
            config,
            model: None,
            history: Vec::new(),
        })
    }

    /// Trains on a list of frames × dims arrays (one per utterance).
    fn fit(&mut self, py: Python<'_>, frames: &Bound<'_, PyList>) -> PyResult<()> {
        let mut source: Vec<Matrix> = Vec::with_capacity(frames.len());
        for (i, x) in frames.iter().enumerate() {
            let x: PyReadonlyArray2<'_, f32> = x.extract().map_err(|_| {
                PyValueError::new_err(format!(
                    "frames[{i}]: expected a 2-D float32 array (frames × dims)"
                ))
            })?;
            source.push(matrix(&x, &format!("frames[{i}]"))?);
        }
        let config = self.config.clone();
        let trained = py
            .allow_threads(|| invar_gmm::train(&source, &config, &mut |_| {}))
            .py()?;
        self.model = Some(trained.gmm);
        self.history = trained.history;
        Ok(())
    }

    /// Frame posteriorgram, frames × components (top_k keeps the k largest per frame, renormalised).
    #[pyo3(signature = (frames, top_k=None))]
    fn posteriors<'py>(
        &self,
        py: Python<'py>,
        frames: PyReadonlyArray2<'py, f32>,
        top_k: Option<usize>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let model = self.model()?;
        let x = matrix(&frames, "frames")?;
        let p = py.allow_threads(|| model.posteriors(&x, top_k)).py()?;
        to_array(py, p)
    }

    /// The MAP-adapted mean supervector of one utterance (components × dims values).
    #[pyo3(signature = (frames, relevance=16.0))]
    fn supervector<'py>(
        &self,
        py: Python<'py>,
        frames: PyReadonlyArray2<'py, f32>,
        relevance: f64,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let model = self.model()?;
        let x = matrix(&frames, "frames")?;
        let cfg = MapConfig { relevance };
        let sv = py
            .allow_threads(|| invar_gmm::supervector(model, &x, &cfg))
            .py()?;
        Ok(sv.into_pyarray(py))
    }

    /// Writes the model as `invar gmm train` does (safetensors + JSON metadata beside it).
    fn save(&self, path: PathBuf) -> PyResult<()> {
        let model = self.model()?;
        let meta = GmmMeta {
            components: model.components(),
            dims: model.dims(),
            config: self.config.clone(),
            history: self.history.clone(),
        };
        model.save(&path, &meta).py()
    }

    /// Reads a model written by `invar gmm train` or `GMM.save`.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<Self> {
        let model = DiagGmm::load(Path::new(&path)).py()?;
        let config = EmConfig {
            components: model.components(),
            ..EmConfig::default()
        };
        Ok(Gmm {
            config,
            model: Some(model),
            history: Vec::new(),
        })
    }

    #[getter]
    fn components(&self) -> usize {
        self.model
            .as_ref()
            .map_or(self.config.components, DiagGmm::components)
    }

    #[getter]
    fn dims(&self) -> Option<usize> {
        self.model.as_ref().map(DiagGmm::dims)
    }
}

/// An i-vector extractor (T matrix) with its UBM, as `invar ivector train` writes it.
#[pyclass(module = "invar")]
struct Ivector {
    ubm: DiagGmm,
    model: invar_gmm::IvectorExtractor,
}

#[pymethods]
impl Ivector {
    /// Reads an extractor written by `invar ivector train`, against the UBM it was trained on.
    #[staticmethod]
    fn load(path: PathBuf, ubm: PyRef<'_, Gmm>) -> PyResult<Self> {
        let ubm = ubm.model()?.clone();
        let model = invar_gmm::IvectorExtractor::load(&path, &ubm).py()?;
        Ok(Ivector { ubm, model })
    }

    /// The i-vector of one utterance's frames (unit length unless `length_norm` is false).
    #[pyo3(signature = (frames, length_norm=true))]
    fn extract<'py>(
        &self,
        py: Python<'py>,
        frames: PyReadonlyArray2<'py, f32>,
        length_norm: bool,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let x = matrix(&frames, "frames")?;
        let iv = py
            .allow_threads(|| self.model.utterance_ivector(&self.ubm, &x, length_norm))
            .py()?;
        Ok(iv.data.into_pyarray(py))
    }

    #[getter]
    fn rank(&self) -> usize {
        self.model.rank()
    }
}

#[pymodule]
#[pyo3(name = "_invar")]
fn invar_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("InvarError", m.py().get_type::<InvarError>())?;
    m.add_function(wrap_pyfunction!(load_audio, m)?)?;
    m.add_function(wrap_pyfunction!(frontend_config, m)?)?;
    m.add_function(wrap_pyfunction!(features, m)?)?;
    m.add_function(wrap_pyfunction!(read_corpus, m)?)?;
    m.add_function(wrap_pyfunction!(abx, m)?)?;
    m.add_function(wrap_pyfunction!(eer, m)?)?;
    m.add_function(wrap_pyfunction!(min_dcf, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(utd, m)?)?;
    m.add_function(wrap_pyfunction!(read_classes, m)?)?;
    m.add_class::<Gmm>()?;
    m.add_class::<Ivector>()?;
    m.add_class::<models::PartitionModel>()?;
    m.add_class::<models::AutoencoderModel>()?;
    m.add_class::<models::SpeakerCnnModel>()?;
    Ok(())
}
