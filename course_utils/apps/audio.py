"""Spoken clips for notebook 10: the stored data set, a WAV-folder loader and log-mel features.

The data set is spoken digit strings and commands (``"two five nine"``, ``"go left"``)
synthesised with espeak-ng by ``scripts/make_speech_data.py`` and stored in ``data/speech``:
one 8 kHz FLAC file per split and a manifest saying where each clip starts, what it says,
and which voice said it at which speed and pitch. The voices of the splits never overlap.

The features are the classic front end of speech recognition, each step a function:
:func:`frame_signal` (25 ms frames every 10 ms), a Hann window, :func:`power_spectrum`
(the FFT's squared magnitude), :func:`mel_filterbank` (triangles evenly spaced on the mel
scale), the log, and a per-utterance normalisation; :func:`log_mel` chains them.

Shapes: ``N`` samples, ``F`` frames, ``W`` frame length, ``K = n_fft // 2 + 1`` frequency
bins, ``M`` mel channels; the legend in :mod:`course_utils` gives the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from course_utils._validate import check_positive, check_tensor
from course_utils.data import SPLITS, TensorBatch, Vocab, pad_sequences, shuffled_batches

RATE = 8000  # samples per second of every clip
FRAME, HOP, N_FFT, N_MELS = 200, 80, 256, 40  # 25 ms frames every 10 ms, 40 mel channels
DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "speech"
ALPHABET = " abcdefghijklmnopqrstuvwxyz"


def char_vocab() -> Vocab:
    """The speller's characters: space and the 26 lower-case letters, after the specials.

    >>> v = char_vocab()
    >>> len(v), v.decode(v.encode(list("go left")))
    (30, ['g', 'o', ' ', 'l', 'e', 'f', 't'])
    """
    return Vocab(list(ALPHABET))


# ---------------------------------------------------------------------------------------
# Features, one step at a time
# ---------------------------------------------------------------------------------------
def _as_audio(name: str, audio: object) -> torch.Tensor:
    if isinstance(audio, np.ndarray):
        audio = torch.from_numpy(audio)
    check_tensor(name, audio, dims=1)
    return audio.float()


def frame_signal(audio: torch.Tensor, frame_len: int = FRAME, hop: int = HOP) -> torch.Tensor:
    """Cut ``audio`` (N,) into overlapping frames (F, W): frame ``f`` is samples
    ``f * hop ... f * hop + frame_len - 1``; the end is padded with zeros so that every
    sample lies in a frame, and ``F = 1 + ceil(max(N - frame_len, 0) / hop)``.

    >>> frame_signal(torch.arange(10.0), frame_len=4, hop=3)
    tensor([[0., 1., 2., 3.],
            [3., 4., 5., 6.],
            [6., 7., 8., 9.]])
    """
    check_positive("frame_len", frame_len)
    check_positive("hop", hop)
    audio = _as_audio("audio", audio)
    n_frames = 1 + math.ceil(max(len(audio) - frame_len, 0) / hop)
    padded = torch.nn.functional.pad(audio, (0, (n_frames - 1) * hop + frame_len - len(audio)))
    return padded.unfold(0, frame_len, hop)  # (N',) -> (F, W)


def hann_window(length: int) -> torch.Tensor:
    """The periodic Hann window ``0.5 - 0.5 cos(2 pi n / length)``, n = 0 .. length - 1
    (what ``torch.hann_window`` returns): frames fade in and out, so cutting them does not
    add edges the spectrum would show as energy at every frequency."""
    check_positive("length", length)
    n = torch.arange(length, dtype=torch.float32)
    return 0.5 - 0.5 * torch.cos(2 * math.pi * n / length)


def power_spectrum(frames: torch.Tensor, n_fft: int = N_FFT) -> torch.Tensor:
    """``|FFT|^2 / n_fft`` of each frame, zero-padded to ``n_fft``: (F, W) -> (F, K),
    ``K = n_fft // 2 + 1`` bins from 0 Hz to half the sample rate."""
    check_tensor("frames", frames, dims=2)
    if frames.shape[1] > n_fft:
        raise ValueError(f"n_fft must be at least the frame length {frames.shape[1]}, got {n_fft}")
    spectrum = torch.fft.rfft(frames, n=n_fft, dim=-1)  # (F, W) -> (F, K), complex
    return spectrum.abs() ** 2 / n_fft


def hz_to_mel(hz: torch.Tensor | float) -> torch.Tensor:
    """The mel scale (O'Shaughnessy's, as HTK uses): ``2595 log10(1 + hz / 700)``; 1000 Hz
    is about 1000 mel, and equal steps in mel sound like equal steps in pitch.

    >>> round(hz_to_mel(1000.0).item(), 1)
    1000.0
    """
    return 2595.0 * torch.log10(1.0 + torch.as_tensor(hz, dtype=torch.float64) / 700.0)


def mel_to_hz(mel: torch.Tensor | float) -> torch.Tensor:
    """The inverse of :func:`hz_to_mel`: ``700 (10^(mel / 2595) - 1)``."""
    return 700.0 * (10.0 ** (torch.as_tensor(mel, dtype=torch.float64) / 2595.0) - 1.0)


def mel_filterbank(
    n_mels: int = N_MELS, n_fft: int = N_FFT, rate: int = RATE, f_min: float = 0.0
) -> torch.Tensor:
    """Triangular filters (M, K): filter ``m`` rises linearly (in Hz) from centre ``m - 1``
    to 1 at centre ``m`` and falls to 0 at centre ``m + 1``, where the ``M + 2`` edges and
    centres are evenly spaced in mel from ``f_min`` to ``rate / 2``. Between two centres the
    two neighbouring filters add up to 1.

    >>> fb = mel_filterbank(n_mels=4, n_fft=16)
    >>> fb.shape, bool((fb >= 0).all())
    (torch.Size([4, 9]), True)
    """
    for name, value in (("n_mels", n_mels), ("n_fft", n_fft), ("rate", rate)):
        check_positive(name, value)
    if not 0 <= f_min < rate / 2:
        raise ValueError(f"f_min must lie in [0, rate / 2 = {rate / 2}), got {f_min}")
    edges = mel_to_hz(
        torch.linspace(hz_to_mel(f_min).item(), hz_to_mel(rate / 2).item(), n_mels + 2)
    )
    bins = torch.linspace(0, rate / 2, n_fft // 2 + 1, dtype=torch.float64)  # (K,) in Hz
    left, centre, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]  # (M, 1) each
    rising = (bins - left) / (centre - left)  # (M, K)
    falling = (right - bins) / (right - centre)
    return torch.clamp(torch.minimum(rising, falling), min=0.0).float()


def log_mel(
    audio: torch.Tensor | np.ndarray,
    n_mels: int = N_MELS,
    normalise: bool = True,
) -> torch.Tensor:
    """The features a listener reads: audio (N,) at :data:`RATE` -> (F, M).

    Frames, Hann window, power spectrum, mel filterbank, ``log(energy + 1e-6)``; with
    ``normalise``, every mel channel then has mean 0 and standard deviation 1 over the
    utterance (which removes the loudness and the microphone's colour).

    >>> log_mel(torch.zeros(RATE)).shape
    torch.Size([99, 40])
    """
    frames = frame_signal(_as_audio("audio", audio)) * hann_window(FRAME)  # (F, W)
    energies = power_spectrum(frames) @ mel_filterbank(n_mels).T  # (F, K) @ (K, M) -> (F, M)
    feats = torch.log(energies + 1e-6)
    if normalise:
        feats = (feats - feats.mean(dim=0)) / (feats.std(dim=0) + 1e-5)
    return feats


# ---------------------------------------------------------------------------------------
# The data set: clips, transcripts, batches
# ---------------------------------------------------------------------------------------
@dataclass
class SpeechBatch(TensorBatch):
    """``feats`` (B, F, M), ``feat_len`` (B,), ``tgt_in`` / ``tgt_out`` (B, T) character ids
    (``<bos>`` + text, text + ``<eos>``)."""

    feats: torch.Tensor
    feat_len: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor


@dataclass
class SpeechData:
    """Clips (float32 arrays in [-1, 1] at :data:`RATE`) with their transcripts and, for the
    stored set, who spoke them; the log-mel features are computed once, on first use."""

    audio: list[np.ndarray]
    texts: list[str]
    voices: list[str]
    speeds: list[int] = field(default_factory=list)
    pitches: list[int] = field(default_factory=list)
    _feats: list[torch.Tensor] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def vocab(self) -> Vocab:
        return char_vocab()

    @property
    def feats(self) -> list[torch.Tensor]:
        if self._feats is None:
            self._feats = [log_mel(a) for a in self.audio]
        return self._feats

    def select(self, indices: list[int]) -> SpeechData:
        """The clips at ``indices``, in that order (their features too, if computed)."""
        pick = lambda xs: [xs[i] for i in indices] if xs else []  # noqa: E731
        feats = None if self._feats is None else pick(self._feats)
        return SpeechData(
            pick(self.audio), pick(self.texts), pick(self.voices), pick(self.speeds),
            pick(self.pitches), feats,
        )  # fmt: skip

    def batch(self, indices: list[int]) -> SpeechBatch:
        v = self.vocab
        feats = [self.feats[i] for i in indices]
        lengths = torch.tensor([len(f) for f in feats])
        padded = torch.zeros(len(feats), int(lengths.max()), feats[0].shape[1])
        for row, f in enumerate(feats):
            padded[row, : len(f)] = f
        ids = [v.encode(list(self.texts[i])) for i in indices]
        tgt_in = pad_sequences([[v.bos_id, *x] for x in ids], v.pad_id)
        tgt_out = pad_sequences([[*x, v.eos_id] for x in ids], v.pad_id)
        return SpeechBatch(padded, lengths, tgt_in, tgt_out)

    def batches(self, batch_size: int, seed: int = 0):  # noqa: ANN201 (an endless iterator)
        """Random batches forever, reshuffled each epoch by a generator seeded with ``seed``
        (:func:`~course_utils.data.shuffled_batches`)."""
        return shuffled_batches(self, batch_size, seed)


def _check_text(text: str, where: str) -> None:
    bad = sorted(set(text) - set(ALPHABET))
    if not text or bad:
        raise ValueError(
            f"{where}: a transcript must be lower-case letters and spaces, got {text!r}"
            + (f" (characters {bad} are not in the alphabet)" if bad else "")
        )


def load_speech(split: str, folder: str | Path = DATA_DIR) -> SpeechData:
    """One split (``"train"``, ``"val"``, ``"test"``) of the stored spoken digits.

    >>> data = load_speech("val")
    >>> len(data), data.texts[0], data.voices[0]
    (80, 'nine three three two', 'en-029+m6')
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    folder = Path(folder)
    manifest = folder / "manifest.tsv"
    if not manifest.exists():
        raise FileNotFoundError(f"no manifest.tsv in {folder}")
    rows = [line.split("\t") for line in manifest.read_text(encoding="utf-8").splitlines()[1:]]
    rows = [r for r in rows if r[0] == f"{split}.flac"]
    samples, rate = sf.read(folder / f"{split}.flac", dtype="float32")
    if rate != RATE:
        raise ValueError(f"{split}.flac: expected {RATE} Hz, got {rate}")
    audio = [samples[int(r[1]) : int(r[1]) + int(r[2])] for r in rows]
    return SpeechData(
        audio, [r[3] for r in rows], [r[4] for r in rows], [int(r[5]) for r in rows],
        [int(r[6]) for r in rows],
    )  # fmt: skip


def load_wav_folder(folder: str | Path, transcripts: str = "transcripts.tsv") -> SpeechData:
    """Your own recordings: a folder of mono WAV files at 8 kHz and a transcript file with one
    ``filename<TAB>text`` line per clip (text in lower-case letters and spaces).

    Raises ``FileNotFoundError`` for a missing transcript file or clip, and ``ValueError``
    naming the file and line for a malformed line or a clip at another sample rate.
    """
    folder = Path(folder)
    path = folder / transcripts
    if not path.exists():
        raise FileNotFoundError(f"no transcript file {path} (one 'filename<TAB>text' a line)")
    audio, texts = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        parts = line.split("\t")
        if len(parts) != 2:
            raise ValueError(f"{where}: expected 'filename<TAB>text', got {line!r}")
        name, text = parts[0].strip(), parts[1].strip()
        _check_text(text, where)
        clip = folder / name
        if not clip.exists():
            raise FileNotFoundError(f"{where}: no audio file {clip}")
        samples, rate = sf.read(clip, dtype="float32", always_2d=True)
        if rate != RATE:
            raise ValueError(f"{where}: {name} is sampled at {rate} Hz, expected {RATE} Hz")
        if samples.shape[1] != 1:
            raise ValueError(f"{where}: {name} has {samples.shape[1]} channels, expected mono")
        audio.append(samples[:, 0])
        texts.append(text)
    if not texts:
        raise ValueError(f"{path} lists no clips")
    return SpeechData(audio, texts, ["unknown"] * len(texts))
