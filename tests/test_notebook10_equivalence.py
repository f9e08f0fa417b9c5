"""Notebook 10's hand-written features, pyramid, listener, speller, edit distance and peak
progress equal course_utils.apps.audio, apps.speech, metrics and alignment."""

import math
import random

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from course_utils import alignment, metrics
from course_utils.apps import audio, speech
from course_utils.attention import AdditiveScore

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "10_speech_recognition.ipynb"
MARKED = {
    "frame_signal",
    "hann_window",
    "power_spectrum",
    "hz_to_mel",
    "mel_filterbank",
    "log_mel",
    "pyramid_reduce",
    "Listener",
    "ListenAttendSpell",
    "edit_distance",
    "progress_of",
}


@pytest.fixture(scope="module")
def nb():
    namespace = {
        "math": math,
        "np": np,
        "stats": stats,
        "torch": torch,
        "nn": nn,
        "AdditiveScore": AdditiveScore,
        "pack_padded_sequence": pack_padded_sequence,
        "pad_packed_sequence": pad_packed_sequence,
    }
    return run_from_scratch_cells(NOTEBOOK, namespace)


@pytest.fixture(scope="module")
def val():
    return audio.load_speech("val")


def test_marked_cells_are_the_ones_tested(nb):
    assert_marked_cells_define(NOTEBOOK, nb, MARKED)


@pytest.mark.parametrize("n", [1, 199, 200, 281, 4000, 12345])
def test_features_equal_library(nb, n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    frames = nb["frame_signal"](x)
    torch.testing.assert_close(frames, audio.frame_signal(x))
    torch.testing.assert_close(nb["hann_window"](200), audio.hann_window(200))
    windowed = frames * audio.hann_window(200)
    torch.testing.assert_close(
        nb["power_spectrum"](windowed), audio.power_spectrum(windowed), rtol=1e-3, atol=1e-5
    )
    if n > 400:  # a per-utterance std needs a few frames
        torch.testing.assert_close(nb["log_mel"](x), audio.log_mel(x), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("n_mels", "n_fft", "rate"), [(40, 256, 8000), (10, 512, 16000), (3, 16, 8000)]
)
def test_mel_scale_and_filterbank_equal_library(nb, n_mels, n_fft, rate):
    hz = torch.tensor([0.0, 300.0, 1000.0, 3999.0])
    torch.testing.assert_close(nb["hz_to_mel"](hz), audio.hz_to_mel(hz))
    torch.testing.assert_close(nb["mel_to_hz"](hz), audio.mel_to_hz(hz))
    torch.testing.assert_close(
        nb["mel_filterbank"](n_mels, n_fft, rate),
        audio.mel_filterbank(n_mels, n_fft, rate),
        atol=1e-6,
        rtol=0,
    )


@pytest.mark.parametrize("lengths", [[6, 3], [5, 5, 1], [7]])
def test_pyramid_reduce_equals_library(nb, lengths):
    x = torch.randn(
        len(lengths), max(lengths), 3, generator=torch.Generator().manual_seed(len(lengths))
    )
    ours, theirs = (
        nb["pyramid_reduce"](x, torch.tensor(lengths)),
        speech.pyramid_reduce(x, torch.tensor(lengths)),
    )
    torch.testing.assert_close(ours[0], theirs[0])
    assert ours[1].tolist() == theirs[1].tolist()


@pytest.mark.parametrize("seed", range(2))
def test_listener_and_speller_equal_library(nb, val, seed):
    sizes = dict(listener_dim=8 + 4 * seed, rnn_dim=12, attn_dim=6, emb_dim=5)
    torch.manual_seed(seed)
    ours = nb["ListenAttendSpell"](30, 0, **sizes).eval()
    library = speech.build_model(True, **sizes).eval()
    library.load_state_dict(ours.state_dict())
    batch = val.batch([seed, seed + 3, seed + 7])
    with torch.no_grad():
        states, lengths = ours.listener(batch.feats, batch.feat_len)
        lib_states, lib_lengths = library.listener(batch.feats, batch.feat_len)
        torch.testing.assert_close(states, lib_states)
        assert lengths.tolist() == lib_lengths.tolist()
        for a, b in zip(
            ours(batch.feats, batch.feat_len, batch.tgt_in),
            library.forward_with_attention(batch),
            strict=True,
        ):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_edit_distance_equals_library(nb):
    rng = random.Random(0)
    for _ in range(100):
        a = "".join(rng.choice("ab n") for _ in range(rng.randint(0, 9)))
        b = "".join(rng.choice("ab n") for _ in range(rng.randint(0, 9)))
        assert nb["edit_distance"](a, b) == metrics.edit_distance(a, b)
        assert nb["edit_distance"](a.split(), b.split()) == metrics.edit_distance(
            a.split(), b.split()
        )


@pytest.mark.parametrize("seed", range(3))
def test_progress_of_equals_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    for T, S in [(2, 3), (7, 4), (13, 12), (5, 1)]:  # S = 1: a peak that cannot move
        w = torch.rand(T, S, generator=g)
        expected = alignment.peak_progress_per_example(w[None], torch.tensor([T]))[0].item()
        assert nb["progress_of"](w) == pytest.approx(expected, abs=1e-12)
    frozen = torch.eye(6)[torch.tensor([4, 4, 4, 4])]
    assert nb["progress_of"](frozen) == 0.0
