"""The base of every model's config dataclass: built from the vocabularies, checks itself.

``seq2seq.Seq2SeqConfig`` (and ``bahdanau.BahdanauConfig``), ``transformer_seq2seq.
TransformerConfig`` and ``apps.summarisation.SummariserConfig`` derive from
:class:`ModelConfig`, so every encoder-decoder model takes its sizes and its special-token ids
from the :class:`~course_utils.data.Vocab` objects, and no model hard-codes an id.
"""

from __future__ import annotations

import dataclasses

from course_utils._validate import check_positive
from course_utils.data import Vocab


class ModelConfig:
    """Base of every model's config dataclass: built from the vocabularies, checks itself.

    A subclass is a ``@dataclass`` with ``src_vocab_size``, ``tgt_vocab_size``, ``pad_id``,
    ``bos_id`` and ``eos_id`` among its fields. :meth:`from_vocab` takes the sizes and the
    special-token ids from the :class:`Vocab` objects, so no model hard-codes an id. On
    construction every field is checked: sizes (``int``) are positive ints, ``int | None``
    sizes are ``None`` or positive, ids lie inside both vocabularies and differ, ``float``
    fields named ``dropout`` lie in [0, 1), ``bool`` fields are bools.
    """

    @classmethod
    def from_vocab(
        cls, src_vocab: Vocab, tgt_vocab: Vocab | None = None, **sizes: object
    ) -> ModelConfig:
        """The config for ``src_vocab`` -> ``tgt_vocab`` (default: the same vocabulary)."""
        tgt_vocab = src_vocab if tgt_vocab is None else tgt_vocab
        for name, v in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab)):
            if not isinstance(v, Vocab):
                raise TypeError(f"{name} must be a Vocab, got {type(v).__name__}")
        ids = {n: getattr(tgt_vocab, n) for n in ("pad_id", "bos_id", "eos_id")}
        if src_vocab.pad_id != tgt_vocab.pad_id:
            raise ValueError(
                f"src_vocab and tgt_vocab must share pad_id, got {src_vocab.pad_id} and "
                f"{tgt_vocab.pad_id}"
            )
        return cls(src_vocab_size=len(src_vocab), tgt_vocab_size=len(tgt_vocab), **ids, **sizes)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, kind = getattr(self, f.name), str(f.type)
            if kind == "bool" and not isinstance(value, bool):
                raise TypeError(f"{f.name} must be a bool, got {value!r}")
            if kind == "float" and f.name == "dropout":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise TypeError(f"dropout must be a float, got {value!r}")
                if not 0.0 <= value < 1.0:
                    raise ValueError(f"dropout must lie in [0, 1), got {value}")
            if kind == "int" and not f.name.endswith("_id"):
                check_positive(f.name, value)
            if kind == "int | None" and value is not None:
                check_positive(f.name, value)
        ids = {n: getattr(self, n) for n in ("pad_id", "bos_id", "eos_id")}
        size = min(self.src_vocab_size, self.tgt_vocab_size)
        for name, value in ids.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {value!r}")
            if not 0 <= value < size:
                raise ValueError(
                    f"{name} must lie in 0..{size - 1} (inside both vocabularies), got {value}"
                )
        if len(set(ids.values())) != 3:
            raise ValueError(f"pad_id, bos_id and eos_id must differ, got {ids}")
