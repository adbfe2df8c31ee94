//! Trained models from their output folders, applied to arrays: a partition (`invar partition
//! train`), a speaker CNN (`invar speaker train`) and a supervector autoencoder (`invar supervector
//! train`). Each method calls the function the matching command runs (`partition apply`,
//! `speaker eval`, `supervector embed`), so the numbers are the command's.

use std::path::PathBuf;

use invar_audio::Audio;
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::{matrix, to_array, OrPy};

/// A trained partition's `W` (input classes × output classes).
#[pyclass(module = "invar", name = "PartitionModel")]
pub struct PartitionModel {
    partition: invar_partition::Partition,
}

#[pymethods]
impl PartitionModel {
    /// Reads `W.npy` from a model folder of `invar partition train` (rows checked to be distributions).
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<Self> {
        let partition = invar_partition::Trained::load(&path, &invar_ops::device("cpu").py()?)
            .py()?
            .partition;
        Ok(Self { partition })
    }

    /// `W` as an array.
    #[getter]
    fn w<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f32>>> {
        to_array(py, self.partition.w.clone())
    }

    /// Each input class's output class (the argmax of its row), as `mapping.json` lists it.
    #[getter]
    fn assignment(&self) -> Vec<usize> {
        self.partition.assignment()
    }

    /// A posteriorgram (frames × inputs) mapped through `W`, or through the binary partition with
    /// `hard`: what `invar partition apply [--hard]` writes for it.
    #[pyo3(signature = (posteriorgram, hard=false))]
    fn transform<'py>(
        &self,
        py: Python<'py>,
        posteriorgram: PyReadonlyArray2<'py, f32>,
        hard: bool,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let x = matrix(&posteriorgram, "posteriorgram")?;
        let y = py
            .allow_threads(|| {
                if hard {
                    self.partition.hard().apply(&x)
                } else {
                    self.partition.apply(&x)
                }
            })
            .py()?;
        to_array(py, y)
    }
}

/// A trained tied-weight autoencoder on supervectors, with its input normaliser.
#[pyclass(module = "invar", name = "AutoencoderModel")]
pub struct AutoencoderModel {
    model: invar_supervector::Trained,
}

#[pymethods]
impl AutoencoderModel {
    /// Reads `supervector.json` and `model.safetensors` from an `invar supervector train` folder.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<Self> {
        let model =
            invar_supervector::Trained::load(&path, &invar_ops::device("cpu").py()?).py()?;
        Ok(Self { model })
    }

    /// The codes of supervectors (rows × input dim → rows × code dim), as `invar supervector embed`.
    fn embed<'py>(
        &self,
        py: Python<'py>,
        supervectors: PyReadonlyArray2<'py, f32>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let x = matrix(&supervectors, "supervectors")?;
        let codes = py.allow_threads(|| self.model.embed(&x, 256)).py()?;
        to_array(py, codes)
    }

    #[getter]
    fn input_dim(&self) -> usize {
        self.model.model.input_dim()
    }

    #[getter]
    fn code_dim(&self) -> usize {
        self.model.model.code_dim()
    }
}

/// A trained speaker CNN with its front-end, normaliser and speakers.
#[pyclass(module = "invar", name = "SpeakerCnnModel")]
pub struct SpeakerCnnModel {
    cnn: invar_speaker_cnn::Trained,
}

impl SpeakerCnnModel {
    /// The signal at the model's front-end rate (resampled as `invar speaker` reads a corpus).
    fn audio(&self, signal: &PyReadonlyArray1<'_, f32>, rate: u32) -> PyResult<Audio> {
        let samples = signal.as_slice().map_err(|_| {
            PyValueError::new_err("signal: expected a contiguous float32 array".to_string())
        })?;
        let want = self.cnn.meta.config.features.frontend.sample_rate;
        Ok(if rate == want {
            Audio {
                samples: samples.to_vec(),
                sample_rate: rate,
            }
        } else {
            Audio {
                samples: invar_audio::resample(samples, rate, want).py()?,
                sample_rate: want,
            }
        })
    }
}

#[pymethods]
impl SpeakerCnnModel {
    /// Reads `speaker_cnn.json` and `model.safetensors` from an `invar speaker train` folder.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<Self> {
        let cnn = invar_speaker_cnn::Trained::load(&path, &invar_ops::device("cpu").py()?).py()?;
        Ok(Self { cnn })
    }

    /// The training speakers, in the order of the log-probability columns.
    #[getter]
    fn speakers(&self) -> Vec<String> {
        self.cnn.meta.speakers.clone()
    }

    /// Per-chunk log-probabilities (chunks × speakers) of one signal.
    fn log_probs<'py>(
        &self,
        py: Python<'py>,
        signal: PyReadonlyArray1<'py, f32>,
        rate: u32,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let audio = self.audio(&signal, rate)?;
        let device = invar_ops::device("cpu").py()?; // models run on the CPU from Python
        let out = py.allow_threads(|| self.cnn.apply(&audio, &device)).py()?;
        to_array(py, out.log_probs)
    }

    /// The speaker `invar speaker eval` decides for one signal (best mean chunk log-probability).
    fn predict(
        &self,
        py: Python<'_>,
        signal: PyReadonlyArray1<'_, f32>,
        rate: u32,
    ) -> PyResult<String> {
        let audio = self.audio(&signal, rate)?;
        let device = invar_ops::device("cpu").py()?; // models run on the CPU from Python
        py.allow_threads(|| self.cnn.predict(&audio, &device)).py()
    }

    /// The utterance embedding: the mean over chunks of the dense layer's output.
    fn embed<'py>(
        &self,
        py: Python<'py>,
        signal: PyReadonlyArray1<'py, f32>,
        rate: u32,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let audio = self.audio(&signal, rate)?;
        let device = invar_ops::device("cpu").py()?; // models run on the CPU from Python
        let e = py.allow_threads(|| self.cnn.embed(&audio, &device)).py()?;
        Ok(e.into_pyarray(py))
    }
}
