"""Train the character language models of notebook 17 and store them small in data/lm/.

    python scripts/train_language_models.py             # all eight (notebook 17 prints each time)
    python scripts/train_language_models.py --only rope # one of them
    python scripts/train_language_models.py --check     # retrain into a temporary folder and
                                                        # say whether data/lm is reproduced

Eight models of the same shape (2 layers, d_model 128, 4 query heads, d_ff 384) are trained
on the same budget (the same steps, batches and learning-rate schedule) on windows of 128
characters of the Python standard library's source (``course_utils.stdlib_text.stdlib_text``):

- ``rope``, ``rope-kv2``, ``rope-kv1``: rotary positions with 4, 2 and 1 key/value heads
  (multi-head, grouped-query and multi-query attention);
- ``sinusoidal``, ``learned``, ``alibi``: the other position encodings, for extrapolation;
- ``rope-start``: ``rope`` again, but every training window starts with a start token (id
  0), the one position every query sees in every window: where attention sinks form;
- ``nope``: no position information at all (NoPE): only the causal mask tells positions
  apart, for extrapolation.

Everything random comes from ``--seed`` (initial weights, then the training windows), and
torch runs on ``--threads`` threads, so a rerun on the same machine and versions gives the
same weights. The weights are stored in float16 (about 0.7 MB a model) with the config, the
character set, the training history and the time it took; the notebook loads them with
``course_utils.language_model.load_lm`` (``torch.load(..., weights_only=True)``).
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_utils.language_model import (  # noqa: E402
    WEIGHTS_DIR,
    DecoderLM,
    LMConfig,
    lm_loss,
    loss_per_position,
    save_lm,
)
from course_utils.stdlib_text import CharVocab, evenly_spaced_windows, random_windows, stdlib_text  # noqa: E402

MODELS = {
    "rope": dict(position="rope", num_kv_heads=4),
    "rope-kv2": dict(position="rope", num_kv_heads=2),
    "rope-kv1": dict(position="rope", num_kv_heads=1),
    "sinusoidal": dict(position="sinusoidal"),
    "learned": dict(position="learned"),
    "alibi": dict(position="alibi"),
    "rope-start": dict(position="rope"),
    "nope": dict(position="none"),
}
START_TOKEN = {"rope-start": 0}  # models whose windows begin with a start token (the unknown id)
SHAPE = dict(d_model=128, num_heads=4, num_layers=2, d_ff=384, max_len=512)
TRAIN_LEN, BATCH_SIZE, LR, WARMUP = 128, 32, 3e-3, 50


def lr_factor(step: int, steps: int) -> float:
    """Linear warm-up over WARMUP steps, then a cosine down to a tenth of the peak."""
    if step <= WARMUP:
        return step / WARMUP
    progress = (step - WARMUP) / max(1, steps - WARMUP)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def train_one(
    name: str,
    train_ids: torch.Tensor,
    val_ids: torch.Tensor,
    vocab: CharVocab,
    steps: int,
    seed: int,
) -> dict:
    val_windows = evenly_spaced_windows(val_ids, 64, TRAIN_LEN, START_TOKEN.get(name))
    torch.manual_seed(seed)
    model = DecoderLM(LMConfig(vocab_size=len(vocab), **SHAPE, **MODELS[name]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    batches = torch.Generator().manual_seed(seed + 1)  # the same windows for every model
    history = {"step": [], "train_loss": [], "val_loss": []}
    start, running, count = time.perf_counter(), 0.0, 0
    for step in range(1, steps + 1):
        model.train()
        batch = random_windows(train_ids, BATCH_SIZE, TRAIN_LEN, batches, START_TOKEN.get(name))
        loss = lm_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for group in optimizer.param_groups:
            group["lr"] = LR * lr_factor(step, steps)
        optimizer.step()
        running, count = running + loss.item(), count + 1
        if step % 100 == 0 or step == steps:
            model.eval()
            val = loss_per_position(model, val_windows).mean().item()
            history["step"].append(step)
            history["train_loss"].append(running / count)
            history["val_loss"].append(val)
            running, count = 0.0, 0
            print(
                f"  {name:<10} step {step:5d}  train {history['train_loss'][-1]:.3f}  val {val:.3f}  ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    seconds = time.perf_counter() - start
    return dict(model=model, history=history, seconds=seconds)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=700, help="optimiser steps per model")
    parser.add_argument("--only", nargs="*", choices=sorted(MODELS), help="train only these")
    parser.add_argument("--out", type=Path, default=WEIGHTS_DIR)
    parser.add_argument(
        "--check", action="store_true", help="train into a temporary folder, compare with --out"
    )
    args = parser.parse_args()
    if args.check:
        stored, args.out = args.out, Path(tempfile.mkdtemp(prefix="lm-check-"))
    torch.set_num_threads(args.threads)
    begin = time.perf_counter()
    vocab = CharVocab()
    text = stdlib_text()
    train_ids = vocab.encode(text.train)
    val_ids = vocab.encode(text.val)
    print(
        f"Python {platform.python_version()} standard library: {len(train_ids):,} training and "
        f"{len(text.val):,} validation characters; torch {torch.__version__}, "
        f"{args.threads} thread(s), seed {args.seed}, {args.steps} steps per model"
    )
    for name in args.only or MODELS:
        run = train_one(name, train_ids, val_ids, vocab, args.steps, args.seed)
        save_lm(
            run["model"],
            args.out / f"{name}.pt",
            vocab.chars,
            history=run["history"],
            seconds=run["seconds"],
            steps=args.steps,
            seed=args.seed,
            threads=args.threads,
            train_len=TRAIN_LEN,
            start_token=START_TOKEN.get(name),
            batch_size=BATCH_SIZE,
            python=platform.python_version(),
            torch=str(torch.__version__),
        )
        size = (args.out / f"{name}.pt").stat().st_size
        print(
            f"{name}: {run['seconds']:.0f} s, wrote {size / 1e6:.2f} MB to {args.out / f'{name}.pt'}"
        )
    print(f"total: {time.perf_counter() - begin:.0f} s")
    if args.check:
        differ = []
        for name in args.only or MODELS:
            ours = torch.load(args.out / f"{name}.pt", weights_only=True)["state_dict"]
            theirs = torch.load(stored / f"{name}.pt", weights_only=True)["state_dict"]
            same = ours.keys() == theirs.keys() and all(
                torch.equal(ours[k], theirs[k]) for k in ours
            )
            print(f"{name}: {'the same weights as' if same else 'DIFFERENT weights from'} {stored}")
            differ += [] if same else [name]
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
