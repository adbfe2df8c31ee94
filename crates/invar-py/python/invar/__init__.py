"""invar from Python: numpy in and out, one call per job.

Every call binds the library function the matching ``invar`` command uses, so results equal the
command line's to the last bit. Long calls release the GIL. Errors are :class:`InvarError` (bad
data, degenerate evaluations), :class:`OSError` / :class:`FileNotFoundError` (files) or
:class:`ValueError` (bad arguments), each carrying invar's message.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _invar
from ._invar import InvarError

__all__ = [
    "InvarError",
    "load_audio",
    "frontend_config",
    "features",
    "Segment",
    "Utterance",
    "Corpus",
    "GMM",
    "IvectorExtractor",
    "abx",
    "eer",
    "min_dcf",
    "verify",
    "Fragment",
    "utd",
    "read_classes",
    "Partition",
    "Autoencoder",
    "SpeakerCnn",
]

PathLike = Union[str, "os.PathLike[str]"]


def _f32(x: Any, ndim: int, what: str) -> np.ndarray:
    """``x`` as a C-contiguous float32 array of ``ndim`` dimensions (no copy when it already is one)."""
    a = np.ascontiguousarray(x, dtype=np.float32)
    if a.ndim != ndim:
        raise ValueError(f"{what}: expected a {ndim}-D array, got shape {a.shape}")
    return a


def load_audio(
    path: PathLike, channel: Optional[int] = None, rate: Optional[int] = None
) -> Tuple[np.ndarray, int]:
    """Decode an audio file (every format invar reads) into mono float32 samples.

    ``channel`` picks one channel (from 0) instead of the mix of all; ``rate`` resamples to that rate
    (as ``invar features`` does when a file's rate differs from the front-end's).
    Returns ``(samples, sample_rate)``.
    """
    return _invar.load_audio(os.fspath(path), channel, rate)


def frontend_config(kind: str = "mfcc", **frontend: Any) -> Dict[str, Any]:
    """The front-end configuration ``invar features --kind KIND`` uses, with ``frontend`` overrides.

    Overrides nest like the JSON config (``frame={"shift_ms": 20}``, ``mfcc={"num_ceps": 20}``);
    fields not given keep ``kind``'s defaults. Unknown fields raise :class:`ValueError`.
    """
    overrides = json.dumps(frontend) if frontend else None
    return json.loads(_invar.frontend_config(kind, overrides))


def features(
    signal: np.ndarray, rate: int, kind: str = "mfcc", *, resample: bool = True, **frontend: Any
) -> np.ndarray:
    """Features of one signal, frames × dims float32, computed as ``invar features`` does.

    ``kind`` is ``"mfcc"``, ``"logmel"`` or ``"spectrogram"`` (Kaldi-compatible defaults);
    ``frontend`` overrides the configuration as in :func:`frontend_config`. A signal at another rate
    than the front-end's is resampled first, unless ``resample=False`` (then it is an error).
    """
    config = json.dumps(frontend_config(kind, **frontend))
    return _invar.features(_f32(signal, 1, "signal"), int(rate), config, resample)


@dataclass(frozen=True)
class Segment:
    """A labelled stretch of an utterance in samples, ``[start, end)``."""

    start: int
    end: int
    label: str


@dataclass(frozen=True)
class Utterance:
    """One recording of one speaker, as invar's corpus readers list it."""

    id: str
    speaker: str
    path: str
    split: str
    sex: Optional[str] = None
    phones: Optional[List[Segment]] = None
    words: Optional[List[Segment]] = None
    text: Optional[str] = None


def _segments(v: Optional[List[Mapping[str, Any]]]) -> Optional[List[Segment]]:
    return None if v is None else [Segment(int(s["start"]), int(s["end"]), s["label"]) for s in v]


class Corpus:
    """A corpus read as ``invar corpus --layout LAYOUT`` reads it; iterate to get :class:`Utterance`\\ s.

    ``layout`` is passed to invar's corpus reader unchanged (``timit``, ``elsdsr``, ``list``, …).
    """

    def __init__(self, path: PathLike, layout: str) -> None:
        raw = json.loads(_invar.read_corpus(os.fspath(path), layout))
        self.layout: str = raw["layout"]
        self.root: str = raw["root"]
        transcripts = raw.get("transcripts", {})
        self.utterances: List[Utterance] = [
            Utterance(
                id=u["id"],
                speaker=u["speaker"],
                path=u["path"],
                split=u["split"],
                sex=u.get("sex"),
                phones=_segments(u.get("phones")),
                words=_segments(u.get("words")),
                text=transcripts[u["id"]]["label"] if u["id"] in transcripts else None,
            )
            for u in raw["utterances"]
        ]

    def __iter__(self) -> Iterator[Utterance]:
        return iter(self.utterances)

    def __len__(self) -> int:
        return len(self.utterances)

    def __getitem__(self, i: int) -> Utterance:
        return self.utterances[i]

    def __repr__(self) -> str:
        return f"Corpus({self.root!r}, layout={self.layout!r}, utterances={len(self)})"


class GMM:
    """A diagonal-covariance GMM / UBM, trained and applied as ``invar gmm`` does.

    ``GMM(components, **em)`` takes invar's EM settings (``max_iters``, ``init``, ``seed``, …) as
    keywords; ``fit`` trains on one array or a list of per-utterance arrays (frames × dims).
    """

    def __init__(self, components: int, **em: Any) -> None:
        self._g = _invar.Gmm(int(components), json.dumps(em) if em else None)

    @classmethod
    def load(cls, path: PathLike) -> "GMM":
        """Read a model written by ``invar gmm train`` or :meth:`save`."""
        g = cls.__new__(cls)
        g._g = _invar.Gmm.load(os.fspath(path))
        return g

    def save(self, path: PathLike) -> None:
        """Write the model as ``invar gmm train`` does (safetensors + metadata JSON)."""
        self._g.save(os.fspath(path))

    def fit(self, frames: Union[np.ndarray, Sequence[np.ndarray]]) -> "GMM":
        """Train with EM on frames (one array or a list of them, one per utterance). Returns self."""
        if isinstance(frames, np.ndarray):
            frames = [frames]
        self._g.fit([_f32(x, 2, f"frames[{i}]") for i, x in enumerate(frames)])
        return self

    def posteriors(self, frames: np.ndarray, top_k: Optional[int] = None) -> np.ndarray:
        """Frame posteriorgram, frames × components float32 (``invar gmm posteriors``)."""
        return self._g.posteriors(_f32(frames, 2, "frames"), top_k)

    def supervector(self, frames: np.ndarray, relevance: float = 16.0) -> np.ndarray:
        """MAP-adapted mean supervector of one utterance (components × dims values)."""
        return self._g.supervector(_f32(frames, 2, "frames"), float(relevance))

    @property
    def components(self) -> int:
        """Number of mixture components."""
        return self._g.components

    @property
    def dims(self) -> Optional[int]:
        """Frame dimension (None before fitting)."""
        return self._g.dims


class IvectorExtractor:
    """An i-vector extractor as ``invar ivector train`` writes it; load it with its UBM."""

    def __init__(self, model: Any) -> None:
        self._m = model

    @classmethod
    def load(cls, path: PathLike, ubm: GMM) -> "IvectorExtractor":
        """Read ``ivector.safetensors`` (from ``invar ivector train``) against its UBM."""
        return cls(_invar.Ivector.load(os.fspath(path), ubm._g))

    def extract(self, frames: np.ndarray, length_norm: bool = True) -> np.ndarray:
        """The i-vector of one utterance (``invar ivector extract``; unit length unless told)."""
        return self._m.extract(_f32(frames, 2, "frames"), length_norm)

    @property
    def rank(self) -> int:
        """The i-vector dimension."""
        return self._m.rank


def abx(
    features: Union[Mapping[str, np.ndarray], PathLike],
    item: PathLike,
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
) -> Dict[str, Dict[str, Any]]:
    """ABX error from a ZeroSpeech ``.item`` file, as ``invar eval abx`` computes it.

    ``features`` is a dict of file id → frames × dims array, or a feature-set folder. ``mode`` is
    ``within``, ``across`` or ``both``. ``distance`` defaults as the CLI's does: ``symmetric-kl``
    when every frame is a probability vector (posteriorgrams), ``angular`` otherwise; each result
    names the distance used. For a folder, frame timing comes from the feature set's
    description (a set that records none needs ``hop_ms``/``win_ms``); a dict of arrays carries none, so ``hop_ms`` and
    ``win_ms`` are required (``ValueError`` otherwise). Returns one result per mode: ``error``, ``pairs`` (per phone pair),
    ``cell_scores``, ``cells``, ``triplets``, ``items``, … as the CLI's ``results.json``.
    ``max_size_group`` / ``max_x_across`` / ``seed`` cap the tokens per cell as ``eval abx
    --max-size-group/--max-x-across/--seed`` do (Libri-light's and ZeroSpeech 2021's 10 and 5);
    unset, every triplet is scored. ``frames`` is which frames an item keeps, as ``eval abx
    --frames``: ``centre`` (every frame whose centre lies in the item) or ``libri-light``
    (Libri-Light's and ZeroSpeech 2021's ``eval_ABX.py``: one frame fewer; with
    ``convention="fastabx"`` and ``distance="angular"`` its scores).
    """
    if isinstance(features, Mapping):
        source: Any = {str(k): _f32(v, 2, f"features[{k!r}]") for k, v in features.items()}
    else:
        source = os.fspath(features)
    results = json.loads(
        _invar.abx(source, os.fspath(item), distance, convention, mode, hop_ms, win_ms, progress,
                   max_size_group, max_x_across, seed, frames)
    )
    return {r["mode"]: r for r in results}


def _labels(labels: Sequence[Any]) -> List[bool]:
    out = []
    for i, v in enumerate(labels):
        if isinstance(v, str):
            if v not in ("target", "nontarget"):
                raise ValueError(f"labels[{i}]: expected target/nontarget or a bool, got {v!r}")
            out.append(v == "target")
        else:
            out.append(bool(v))
    return out


def eer(scores: Sequence[float], labels: Sequence[Any]) -> Tuple[float, float]:
    """Equal error rate as Kaldi's ``ivector-compute-eer`` (scores: higher = target).

    ``labels`` are bools (True = target) or ``"target"``/``"nontarget"``. Returns
    ``(eer in [0, 1], threshold score)``.
    """
    return _invar.eer(np.asarray(scores, dtype=np.float32).tolist(), _labels(labels))


def min_dcf(
    scores: Sequence[float],
    labels: Sequence[Any],
    p_target: float = 0.01,
    c_miss: float = 1.0,
    c_fa: float = 1.0,
) -> Tuple[float, float]:
    """Normalised minimum detection cost as Kaldi's ``compute_min_dcf.py``: ``(min_dcf, threshold)``."""
    return _invar.min_dcf(
        np.asarray(scores, dtype=np.float32).tolist(), _labels(labels), p_target, c_miss, c_fa
    )


def verify(
    embeddings: np.ndarray,
    speakers: Sequence[str],
    trials: Optional[PathLike] = None,
    ids: Optional[Sequence[str]] = None,
    metrics: Sequence[str] = ("angular", "euclidean"),
) -> Dict[str, Dict[str, Any]]:
    """Speaker verification from embeddings (N × D), as ``invar eval verify`` scores it.

    Without ``trials`` every pair is a trial; with a Kaldi trials file (``utt1 utt2 target|nontarget``)
    ``ids`` names each row. Returns one report per metric: ``eer``, ``min_dcf``, ``det``,
    ``threshold_count``, … as the CLI's ``results.json``.
    """
    reports = json.loads(
        _invar.verify(
            _f32(embeddings, 2, "embeddings"),
            [str(s) for s in speakers],
            None if trials is None else os.fspath(trials),
            None if ids is None else [str(i) for i in ids],
            list(metrics),
        )
    )
    return {r["metric"]: r for r in reports}


@dataclass(frozen=True)
class Fragment:
    """A stretch of one utterance, in seconds."""

    file: str
    start: float
    end: float


def _classes(raw: List[Mapping[str, Any]]) -> Dict[int, List[Fragment]]:
    return {
        int(c["id"]): [Fragment(f["file"], float(f["start"]), float(f["end"])) for f in c["fragments"]]
        for c in raw
    }


def utd(features: Union[Mapping[str, np.ndarray], PathLike], **config: Any) -> Dict[int, List[Fragment]]:
    """Unsupervised term discovery as ``invar utd`` runs it: class id → fragments.

    ``features`` is a dict of utterance id → frames × dims array, or a feature-set folder (whose
    config gives the frame timing and, for MFCC with energy, the energy gate on c0, as ``invar utd``
    does). ``config`` overrides invar's UTD settings (``search``, ``refine``, ``cmvn``,
    ``silence``, ``seed``, … as in ``invar utd --config``); arrays get no energy gate unless
    ``silence={"energy_dim": 0}``.
    """
    if isinstance(features, Mapping):
        source: Any = {str(k): _f32(v, 2, f"features[{k!r}]") for k, v in features.items()}
    else:
        source = os.fspath(features)
    return _classes(json.loads(_invar.utd(source, json.dumps(config) if config else None)))


def read_classes(path: PathLike) -> Dict[int, List[Fragment]]:
    """Read a ZRTools class file (as ``invar utd`` writes): class id → fragments."""
    return _classes(json.loads(_invar.read_classes(os.fspath(path))))


class Partition:
    """A trained 000 partition (``invar partition train``'s model folder): ``W``, inputs × outputs."""

    def __init__(self, model: Any) -> None:
        self._m = model

    @classmethod
    def load(cls, folder: PathLike) -> "Partition":
        """Read ``W.npy`` from a model folder (rows checked to be distributions)."""
        return cls(_invar.PartitionModel.load(os.fspath(folder)))

    @property
    def W(self) -> np.ndarray:  # noqa: N802 (the paper's name)
        """The soft partition, input classes × output classes."""
        return self._m.w

    @property
    def assignment(self) -> List[int]:
        """Each input class's output class (the argmax of its row), as ``mapping.json``."""
        return list(self._m.assignment)

    def transform(self, posteriorgram: np.ndarray, hard: bool = False) -> np.ndarray:
        """A posteriorgram (frames × inputs) mapped through ``W`` (or the binary partition with
        ``hard``): what ``invar partition apply [--hard]`` writes for it."""
        return self._m.transform(_f32(posteriorgram, 2, "posteriorgram"), hard)


class Autoencoder:
    """A trained 002 autoencoder (``invar supervector train``'s folder), with its input normaliser."""

    def __init__(self, model: Any) -> None:
        self._m = model

    @classmethod
    def load(cls, folder: PathLike) -> "Autoencoder":
        """Read ``supervector.json`` and ``model.safetensors`` from a training folder."""
        return cls(_invar.AutoencoderModel.load(os.fspath(folder)))

    def embed(self, supervectors: np.ndarray) -> np.ndarray:
        """Codes of supervectors (rows × input dim → rows × code dim), as ``invar supervector embed``."""
        return self._m.embed(_f32(supervectors, 2, "supervectors"))

    @property
    def input_dim(self) -> int:
        return self._m.input_dim

    @property
    def code_dim(self) -> int:
        return self._m.code_dim


class SpeakerCnn:
    """A trained 001 speaker CNN (``invar speaker train``'s folder): its front-end, normaliser and
    speakers. Signals at another rate than the model's front-end are resampled first."""

    def __init__(self, model: Any) -> None:
        self._m = model

    @classmethod
    def load(cls, folder: PathLike) -> "SpeakerCnn":
        """Read ``speaker_cnn.json`` and ``model.safetensors`` from a training folder."""
        return cls(_invar.SpeakerCnnModel.load(os.fspath(folder)))

    @property
    def speakers(self) -> List[str]:
        """The training speakers, in the order of :meth:`log_probs`' columns."""
        return list(self._m.speakers)

    def log_probs(self, signal: np.ndarray, rate: int) -> np.ndarray:
        """Per-chunk log-probabilities, chunks × speakers (a signal shorter than one chunk raises)."""
        return self._m.log_probs(_f32(signal, 1, "signal"), int(rate))

    def predict(self, signal: np.ndarray, rate: int) -> str:
        """The speaker ``invar speaker eval`` decides: the best mean log-probability over chunks."""
        return self._m.predict(_f32(signal, 1, "signal"), int(rate))

    def embed(self, signal: np.ndarray, rate: int) -> np.ndarray:
        """The utterance embedding: the mean over its chunks of the dense layer's output."""
        return self._m.embed(_f32(signal, 1, "signal"), int(rate))
