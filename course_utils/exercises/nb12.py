"""Checkers for the exercises of notebook 12 (with and without attention, measured).

``check_welch`` compares a hand-written difference of means and its standard error with
``apps.protocol.compare_runs``; ``check_gru_parameters`` compares a closed-form parameter
count of the GRU encoder-decoder without attention with ``count_parameters`` of the real
model, for vocabularies, embeddings and states of several sizes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_utils.apps.protocol import compare_runs
from course_utils.exercises import check_function, seeded
from course_utils.seq2seq import Seq2Seq, Seq2SeqConfig
from course_utils.training import count_parameters


def _welch(with_attention: list[float], without: list[float]) -> tuple[float, float]:
    out = compare_runs(with_attention, without)
    return out["difference"], out["standard_error"]


def check_welch(fn: Callable) -> None:
    """Check ``welch(with_attention, without)`` -> ``(difference, standard_error)``."""
    g = seeded(12)
    cases = [([0.91, 0.93, 0.92], [0.20, 0.25, 0.15]), ([1.0, 3.0], [2.0, 2.0, 2.0, 6.0])]
    for n1, n2 in [(5, 5), (3, 6), (8, 2)]:
        a = (torch.rand(n1, generator=g, dtype=torch.float64) * 0.1 + 0.8).tolist()
        b = (torch.rand(n2, generator=g, dtype=torch.float64) * 0.3 + 0.4).tolist()
        cases.append((a, b))
    check_function(
        fn,
        _welch,
        cases,
        name="welch",
        hint=(
            "the difference is the mean of with_attention minus the mean of without; each "
            "sample's mean is uncertain by its standard deviation over sqrt(its size).",
            "use the sample variance (divide by n - 1, as statistics.variance does), then "
            "standard_error = sqrt(var1 / n1 + var2 / n2): the two uncertainties add as squares.",
        ),
    )


def _gru_parameters(vocab_size: int, emb_dim: int, rnn_dim: int) -> int:
    config = Seq2SeqConfig(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size,
                           emb_dim=emb_dim, rnn_dim=rnn_dim)  # fmt: skip
    return count_parameters(Seq2Seq(config))


def check_gru_parameters(fn: Callable) -> None:
    """Check ``gru_parameters(vocab_size, emb_dim, rnn_dim)`` -> the number of parameters of
    ``seq2seq.Seq2Seq`` (one vocabulary for source and target)."""
    cases = [(13, 32, 64), (13, 32, 96), (5, 4, 6), (40, 16, 128), (7, 1, 1)]
    check_function(
        fn,
        _gru_parameters,
        cases,
        name="gru_parameters",
        hint=(
            "count each piece of the model: the encoder's embedding and GRU, the decoder's "
            "embedding and GRU, and the output layer from the state to the vocabulary.",
            "an embedding holds V * E numbers; a one-layer GRU from E to R holds three gates' "
            "weights, 3 * (E * R + R * R), and two bias vectors per gate, 3 * 2 * R; the output "
            "layer R * V + V.",
        ),
    )
