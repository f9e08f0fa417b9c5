"""Log-mel features against independent references: the mel scale's closed form, triangles
checked point by point, numpy's FFT, torch's Hann window; framing shapes; the stored data
against its manifest; the WAV-folder loader's errors on files written here."""

import math

import numpy as np
import pytest
import soundfile as sf
import torch

from course_utils.apps import audio


@pytest.mark.parametrize("hz", [0.0, 100.0, 700.0, 1000.0, 4000.0])
def test_mel_scale_closed_form_and_round_trip(hz):
    mel = audio.hz_to_mel(hz).item()
    assert mel == pytest.approx(2595 * math.log10(1 + hz / 700))
    assert audio.mel_to_hz(mel).item() == pytest.approx(hz, abs=1e-9)
    assert audio.hz_to_mel(1000.0).item() == pytest.approx(1000.0, abs=0.1)  # the anchor


def test_filterbank_peaks_at_mel_spaced_centres_and_neighbours_sum_to_one():
    n_mels, n_fft, rate = 10, 512, 8000
    fb = audio.mel_filterbank(n_mels, n_fft, rate).double()
    mels = np.linspace(0, 2595 * math.log10(1 + 4000 / 700), n_mels + 2)
    centres = 700 * (10 ** (mels / 2595) - 1)
    bins = np.linspace(0, rate / 2, n_fft // 2 + 1)
    for m in range(n_mels):
        peak = bins[fb[m].argmax()]
        assert abs(peak - centres[m + 1]) <= rate / n_fft, (m, peak, centres[m + 1])
        outside = (bins <= centres[m]) | (bins >= centres[m + 2])
        assert fb[m][torch.from_numpy(outside)].abs().max() == 0
    # between the first and the last centre, the two neighbouring triangles add up to one
    inner = (bins >= centres[1]) & (bins <= centres[-2])
    torch.testing.assert_close(
        fb.sum(0)[torch.from_numpy(inner)], torch.ones(int(inner.sum())).double()
    )
    # one triangle against its definition, bin by bin
    left, centre, right = centres[3], centres[4], centres[5]
    expected = np.clip(
        np.minimum((bins - left) / (centre - left), (right - bins) / (right - centre)), 0, None
    )
    np.testing.assert_allclose(fb[3].numpy(), expected, atol=1e-6)


@pytest.mark.parametrize(
    ("n", "frames"), [(1, 1), (200, 1), (201, 2), (280, 2), (281, 3), (8000, 99)]
)
def test_framing_shapes_cover_every_sample(n, frames):
    x = torch.arange(1, n + 1, dtype=torch.float32)
    out = audio.frame_signal(x)
    assert out.shape == (frames, audio.FRAME)
    assert int(out.max()) == n  # the last sample is in a frame
    assert out[:, 0].tolist() == [f * audio.HOP + 1.0 for f in range(frames)]  # frame starts


def test_hann_window_equals_torch():
    torch.testing.assert_close(audio.hann_window(200), torch.hann_window(200))


def test_power_spectrum_equals_numpy_fft():
    g = np.random.default_rng(0)
    frames = g.standard_normal((7, 200))
    expected = np.abs(np.fft.rfft(frames, n=256)) ** 2 / 256
    got = audio.power_spectrum(torch.from_numpy(frames).float())
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_log_mel_of_a_tone_peaks_in_the_filter_around_its_frequency():
    t = np.arange(audio.RATE) / audio.RATE
    feats = audio.log_mel(np.sin(2 * np.pi * 1000 * t).astype(np.float32), normalise=False)
    fb = audio.mel_filterbank()
    bin_1k = round(1000 / (audio.RATE / 2) * (audio.N_FFT // 2))
    assert int(feats.mean(0).argmax()) == int(fb[:, bin_1k].argmax())
    normalised = audio.log_mel(torch.randn(4000))
    torch.testing.assert_close(normalised.mean(0), torch.zeros(40), atol=1e-4, rtol=0)


def test_feature_functions_reject_bad_input():
    with pytest.raises(ValueError, match="frame_len"):
        audio.frame_signal(torch.zeros(10), frame_len=0)
    with pytest.raises(ValueError, match="audio"):
        audio.frame_signal(torch.zeros(2, 10))
    with pytest.raises(ValueError, match="n_fft"):
        audio.power_spectrum(torch.zeros(3, 300), n_fft=256)
    with pytest.raises(ValueError, match="f_min"):
        audio.mel_filterbank(f_min=5000)


# ---------------------------------------------------------------------------------------
# The stored data and the loaders
# ---------------------------------------------------------------------------------------
def read_manifest():
    lines = (audio.DATA_DIR / "manifest.tsv").read_text(encoding="utf-8").splitlines()
    return [dict(zip(lines[0].split("\t"), line.split("\t"), strict=True)) for line in lines[1:]]


def test_manifest_matches_the_stored_audio():
    rows = read_manifest()
    for split, n in {"train": 640, "val": 80, "test": 120}.items():
        mine = [r for r in rows if r["file"] == f"{split}.flac"]
        info = sf.info(audio.DATA_DIR / f"{split}.flac")
        assert len(mine) == n
        assert info.samplerate == audio.RATE and info.channels == 1
        starts = [int(r["start"]) for r in mine]
        ends = [int(r["start"]) + int(r["samples"]) for r in mine]
        assert starts[0] == 0 and starts[1:] == ends[:-1]  # one after the other, no gap
        assert ends[-1] == info.frames
        assert all(0.3 < int(r["samples"]) / audio.RATE < 4 for r in mine)
        data = audio.load_speech(split)
        assert [len(a) for a in data.audio] == [int(r["samples"]) for r in mine]
        assert data.texts == [r["transcript"] for r in mine]
    size = sum(p.stat().st_size for p in audio.DATA_DIR.iterdir())
    assert size < 10e6, f"data/speech holds {size / 1e6:.1f} MB"


def test_no_voice_is_in_two_splits():
    voices = {s: set(audio.load_speech(s).voices) for s in ("train", "val", "test")}
    assert not voices["train"] & voices["test"]
    assert not voices["train"] & voices["val"]
    assert not voices["val"] & voices["test"]
    variants = {s: {v.split("+")[1] for v in vs} for s, vs in voices.items()}
    assert not variants["train"] & variants["test"]  # not even the voice variant is shared


def test_batches_pad_features_and_transcripts():
    data = audio.load_speech("val")
    b = data.batch([0, 1, 2])
    assert b.feats.shape[0] == 3 and b.feats.shape[2] == audio.N_MELS
    assert b.feat_len.tolist() == [len(data.feats[i]) for i in range(3)]
    v = data.vocab
    for row in range(3):
        n = len(data.texts[row])
        assert "".join(v.decode(b.tgt_out[row])) == data.texts[row]
        assert b.tgt_in[row, 0] == v.bos_id and b.tgt_out[row, n] == v.eos_id
        assert (b.feats[row, b.feat_len[row] :] == 0).all()


def write_folder(tmp_path, lines, rate=audio.RATE, channels=1):
    for name in ("a.wav", "b.wav"):
        sf.write(tmp_path / name, np.zeros((800, channels), dtype=np.float32), rate)
    (tmp_path / "transcripts.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def test_wav_folder_loader_reads_clips_and_transcripts(tmp_path):
    data = audio.load_wav_folder(write_folder(tmp_path, ["a.wav\tgo left", "", "b.wav\tnine"]))
    assert data.texts == ["go left", "nine"] and [len(a) for a in data.audio] == [800, 800]
    assert data.batch([0, 1]).feats.shape == (2, 9, audio.N_MELS)  # 1 + ceil(600 / 80)


@pytest.mark.parametrize(
    ("lines", "error", "match"),
    [
        (["a.wav go left"], ValueError, "line 1: expected 'filename<TAB>text'"),
        (["a.wav\tgo\tleft"], ValueError, "line 1: expected"),
        (["a.wav\tGo Left!"], ValueError, "line 1: a transcript must be lower-case"),
        (["a.wav\tnine", "c.wav\tstop"], FileNotFoundError, "line 2: no audio file"),
        ([""], ValueError, "lists no clips"),
    ],
)
def test_wav_folder_loader_errors_name_file_and_line(tmp_path, lines, error, match):
    with pytest.raises(error, match=match):
        audio.load_wav_folder(write_folder(tmp_path, lines))


def test_wav_folder_loader_rejects_other_rates_channels_and_missing_transcripts(tmp_path):
    with pytest.raises(ValueError, match="16000 Hz, expected 8000 Hz"):
        audio.load_wav_folder(write_folder(tmp_path, ["a.wav\tgo"], rate=16000))
    with pytest.raises(ValueError, match="2 channels"):
        audio.load_wav_folder(write_folder(tmp_path, ["a.wav\tgo"], channels=2))
    with pytest.raises(FileNotFoundError, match="no transcript file"):
        audio.load_wav_folder(tmp_path / "nowhere")
