"""One greedy decoding of a summariser, step by step, for notebook 08's figures and widget.

:func:`trace` repeats :func:`course_utils.apps.summarisation.summarise` for one report and
keeps what the summary alone hides: each step's attention, ``p_gen`` and coverage, and
whether the chosen word came mostly from copying.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from course_utils.apps import news
from course_utils.apps.summarisation import Summariser


@dataclass
class Trace:
    """One greedy decoding, step by step: ``words`` (T,), ``weights`` (T, S) or None,
    ``p_gen`` (T,) or None, ``coverage`` (T + 1, S) (attention summed before each step;
    the last row is the total), and ``copied`` (T,): True where copying gave the chosen
    word more probability than generating did."""

    source: list[str]
    words: list[str]
    weights: torch.Tensor | None
    p_gen: torch.Tensor | None
    coverage: torch.Tensor
    copied: list[bool]


@torch.no_grad()
def trace(model: Summariser, data: news.NewsData, index: int, max_steps: int = 40) -> Trace:
    """Greedy-decode report ``index`` of ``data`` and keep every step's attention, p_gen
    and coverage (the same decoding as :func:`course_utils.apps.summarisation.summarise`,
    one report at a time)."""
    if not isinstance(index, int) or not 0 <= index < len(data):
        raise ValueError(f"index must be an int in 0..{len(data) - 1}, got {index!r}")
    model.eval()
    device = next(model.parameters()).device
    batch = news.make_news_batch([data.encoded[index]], data.vocab).to(device)
    state = model.start(batch)
    token = torch.tensor([model.bos_id], device=device)
    ids, weights, p_gens, coverage, copied = [], [], [], [state[-1][0].clone()], []
    for _ in range(max_steps):
        log_probs, state, w, p_gen, _ = model._step(token, state)
        token = log_probs.argmax(-1)  # (1,)
        if w is not None:
            weights.append(w[0])
            coverage.append(state[-1][0].clone())
        if p_gen is not None:
            p_gens.append(p_gen[0])
            copy = ((1 - p_gen[0]) * w[0] * (batch.src_ext[0] == token[0])).sum()
            copied.append(bool(copy > log_probs[0, token[0]].exp() - copy))
        else:
            copied.append(False)
        ids.append(int(token))
        if ids[-1] == model.eos_id:
            break
    out = news.words(ids, data.vocab, data.encoded[index].oovs)
    if ids[-1] == model.eos_id:
        out = out + ["<eos>"]
    T = len(out)
    return Trace(
        source=list(data.reports[index].document),
        words=out,
        weights=torch.stack(weights)[:T].cpu() if weights else None,
        p_gen=torch.stack(p_gens)[:T].cpu() if p_gens else None,
        coverage=torch.stack(coverage)[: T + 1].cpu(),
        copied=copied[:T],
    )
