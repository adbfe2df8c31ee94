"""Type stubs of the native module; call these through the ``invar`` package."""

from typing import Any, List, Optional, Tuple

import numpy as np

class InvarError(Exception):
    """An error reported by invar, with invar's message (file, line, expected vs found)."""

def load_audio(path: str, channel: Optional[int], rate: Optional[int]) -> Tuple[np.ndarray, int]:
    """Decode an audio file into mono float32 samples: (samples, rate)."""

def frontend_config(kind: str, overrides: Optional[str] = None) -> str:
    """The front-end config of ``kind`` with JSON overrides laid over it, as JSON."""

def features(signal: np.ndarray, rate: int, config: str, resample: bool = True) -> np.ndarray:
    """Features (frames × dims float32) of a float32 signal under a JSON front-end config."""

def read_corpus(path: str, layout: str) -> str:
    """The corpus at ``path`` read in ``layout``, as JSON."""

def abx(
    features: Any,
    item: str,
    distance: Optional[str] = None,
    convention: str = "zs2015",
    mode: str = "both",
    hop_ms: Optional[float] = None,
    win_ms: Optional[float] = None,
    progress: bool = False,
    max_size_group: Optional[int] = None,
    max_x_across: Optional[int] = None,
    seed: int = 0,
    frames: str = "centre",
) -> str:
    """ABX results JSON (a list, one result per mode)."""

def eer(scores: List[float], labels: List[bool]) -> Tuple[float, float]:
    """Kaldi's EER: (eer, threshold)."""

def min_dcf(
    scores: List[float], labels: List[bool], p_target: float = 0.01, c_miss: float = 1.0, c_fa: float = 1.0
) -> Tuple[float, float]:
    """Kaldi's normalised minDCF: (min_dcf, threshold)."""

def verify(
    embeddings: np.ndarray,
    speakers: List[str],
    trials: Optional[str] = None,
    ids: Optional[List[str]] = None,
    metrics: List[str] = ...,
) -> str:
    """Verification reports JSON (a list, one per metric)."""

class Gmm:
    """A diagonal-covariance GMM (use ``invar.GMM``)."""

    def __init__(self, components: int, config: Optional[str] = None) -> None: ...
    def fit(self, frames: List[np.ndarray]) -> None: ...
    def posteriors(self, frames: np.ndarray, top_k: Optional[int] = None) -> np.ndarray: ...
    def supervector(self, frames: np.ndarray, relevance: float = 16.0) -> np.ndarray: ...
    def save(self, path: str) -> None: ...
    @staticmethod
    def load(path: str) -> "Gmm": ...
    @property
    def components(self) -> int: ...
    @property
    def dims(self) -> Optional[int]: ...

def utd(features: Any, config: Optional[str] = None) -> str:
    """Term-discovery classes JSON."""

def read_classes(path: str) -> str:
    """A class file's classes as JSON."""

class Ivector:
    """An i-vector extractor (use ``invar.IvectorExtractor``)."""

    @staticmethod
    def load(path: str, ubm: Gmm) -> "Ivector": ...
    def extract(self, frames: np.ndarray, length_norm: bool = True) -> np.ndarray: ...
    @property
    def rank(self) -> int: ...

class PartitionModel:
    """A trained partition (use ``invar.Partition``)."""

    @staticmethod
    def load(path: str) -> "PartitionModel": ...
    @property
    def w(self) -> np.ndarray: ...
    @property
    def assignment(self) -> List[int]: ...
    def transform(self, posteriorgram: np.ndarray, hard: bool = False) -> np.ndarray: ...

class AutoencoderModel:
    """A trained supervector autoencoder (use ``invar.Autoencoder``)."""

    @staticmethod
    def load(path: str) -> "AutoencoderModel": ...
    def embed(self, supervectors: np.ndarray) -> np.ndarray: ...
    @property
    def input_dim(self) -> int: ...
    @property
    def code_dim(self) -> int: ...

class SpeakerCnnModel:
    """A trained speaker CNN (use ``invar.SpeakerCnn``)."""

    @staticmethod
    def load(path: str) -> "SpeakerCnnModel": ...
    @property
    def speakers(self) -> List[str]: ...
    def log_probs(self, signal: np.ndarray, rate: int) -> np.ndarray: ...
    def predict(self, signal: np.ndarray, rate: int) -> str: ...
    def embed(self, signal: np.ndarray, rate: int) -> np.ndarray: ...
