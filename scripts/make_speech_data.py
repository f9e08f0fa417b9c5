"""Synthesise the spoken digit strings and commands of notebook 10 with espeak-ng.

    python scripts/make_speech_data.py            # writes data/speech/
    python scripts/make_speech_data.py --check    # regenerates into a temporary folder and
                                                  # says whether it equals data/speech/ bit for bit

Each utterance is a string of two to four digit words ("two five nine") or a short command
("go left"), spoken by one voice (an espeak-ng language such as ``en-us`` with a variant such
as ``m3``), at a random speed (words per minute) and pitch. The audio is cut to the speech,
given 50-150 ms of silence on each side, resampled from espeak-ng's 22 050 Hz to 8 kHz, mixed
with white noise at a random signal-to-noise ratio of 35-50 dB and quantised to 12 bits.

The voices of the three splits never overlap: every voice variant belongs to one split
(``VARIANTS``), so the test speakers' formants and pitch ranges are never heard in training.
Each split is one FLAC file (every utterance one after the other), and ``manifest.tsv``
says where each utterance starts and ends, with its transcript, voice, speed and pitch.

Everything random comes from one seeded NumPy generator, so the files are the same bit for
bit wherever the same espeak-ng version runs (1.51 made the stored files). The notebook and
the tests read the stored files and never need espeak-ng.
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "speech"
RATE = 8000
ESPEAK_RATE = 22050
SIZES = {"train": 640, "val": 80, "test": 120}
LANGUAGES = ("en-us", "en-gb", "en-gb-scotland", "en-029")
VARIANTS = {
    "train": ("m1", "m2", "m4", "m5", "m7", "f1", "f3", "f4", "f5"),
    "val": ("m6",),
    "test": ("m3", "f2"),
}
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
COMMANDS = (
    "stop",
    "go",
    "yes",
    "no",
    "go left",
    "go right",
    "turn left",
    "turn right",
    "go up",
    "go down",
)
SEED = 10


def transcript(rng: np.random.Generator) -> str:
    if rng.random() < 0.25:
        return COMMANDS[rng.integers(len(COMMANDS))]
    n = int(rng.integers(2, 5))
    return " ".join(DIGITS[d] for d in rng.integers(0, 10, size=n))


def speak(text: str, voice: str, speed: int, pitch: int, workdir: Path) -> np.ndarray:
    wav = workdir / "utterance.wav"
    cmd = ["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(wav), text]
    subprocess.run(cmd, check=True, capture_output=True)
    audio, rate = sf.read(wav, dtype="float64")
    if rate != ESPEAK_RATE:
        raise RuntimeError(f"espeak-ng wrote {rate} Hz, expected {ESPEAK_RATE}")
    return audio


def finish(audio: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Trim, pad with silence, resample to 8 kHz, add noise, quantise to 12 bits in int16."""
    loud = np.flatnonzero(np.abs(audio) > 0.01 * np.abs(audio).max())
    audio = audio[loud[0] : loud[-1] + 1]
    pad = rng.integers(int(0.05 * ESPEAK_RATE), int(0.15 * ESPEAK_RATE), size=2)
    audio = np.concatenate([np.zeros(pad[0]), audio, np.zeros(pad[1])])
    audio = resample_poly(audio, 160, 441)  # 22 050 Hz * 160 / 441 = 8 000 Hz
    audio = 0.5 * audio / np.abs(audio).max()
    snr_db = rng.uniform(35, 50)
    noise = rng.standard_normal(len(audio)) * np.sqrt(np.mean(audio**2) / 10 ** (snr_db / 10))
    # 12-bit samples stored as int16 (multiples of 16): FLAC drops the four idle low bits,
    # which keeps the whole set near 6 MB, and the rounding is 60 dB below the peak
    return (np.round(np.clip(audio + noise, -1, 1) * 2047) * 16).astype(np.int16)


def generate(out: Path) -> None:
    rng = np.random.default_rng(SEED)
    out.mkdir(parents=True, exist_ok=True)
    rows = ["file\tstart\tsamples\ttranscript\tvoice\tspeed\tpitch"]
    with tempfile.TemporaryDirectory() as tmp:
        for split, n in SIZES.items():
            clips, start = [], 0
            for _ in range(n):
                text = transcript(rng)
                voice = f"{LANGUAGES[rng.integers(len(LANGUAGES))]}+{rng.choice(VARIANTS[split])}"
                speed, pitch = int(rng.integers(130, 211)), int(rng.integers(25, 76))
                clip = finish(speak(text, voice, speed, pitch, Path(tmp)), rng)
                rows.append(
                    f"{split}.flac\t{start}\t{len(clip)}\t{text}\t{voice}\t{speed}\t{pitch}"
                )
                clips.append(clip)
                start += len(clip)
            sf.write(out / f"{split}.flac", np.concatenate(clips), RATE, subtype="PCM_16")
    (out / "manifest.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare a fresh run with data/speech")
    args = parser.parse_args()
    if shutil.which("espeak-ng") is None:
        print(
            "espeak-ng is not installed, so the data cannot be regenerated here "
            "(Debian/Ubuntu: apt-get install espeak-ng). The stored files in data/speech are "
            "all the notebook and the tests need."
        )
        return 1
    began = time.perf_counter()
    target = Path(tempfile.mkdtemp()) if args.check else OUT
    generate(target)
    names = ["manifest.tsv", *(f"{split}.flac" for split in SIZES)]
    total = sum((target / name).stat().st_size for name in names)
    print(f"wrote {len(names)} files, {total / 1e6:.2f} MB, in {time.perf_counter() - began:.0f} s")
    for name in names:
        print(f"  {name}  sha256 {hashlib.sha256((target / name).read_bytes()).hexdigest()[:16]}")
    if args.check:
        same = all(filecmp.cmp(target / n, OUT / n, shallow=False) for n in names)
        print("identical to data/speech" if same else "DIFFERENT from data/speech")
        shutil.rmtree(target)
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
