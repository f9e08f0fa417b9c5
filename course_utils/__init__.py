"""Attention from Scratch: the tested helpers that the course notebooks import.

Modules, one concern each: ``attention`` (scores, masked softmax, masks, attention,
multi-head attention), ``data`` (seeded synthetic tasks and batches), ``training`` (seeding,
device, the training loop, losses and learning-rate schedules, the cache of trained weights),
``targets`` (a notebook's learning targets), ``seq2seq`` (the GRU encoder-decoder of notebook
01), ``bahdanau`` (the same with additive attention, notebook 03), ``positional``
(sinusoidal, learned and rotary positions), ``toy_models`` (small attention-only models whose
heads can be read), ``transformer`` (the Transformer's layers and core),
``transformer_seq2seq`` (a seq2seq model around it, greedy and beam search), ``efficient``
(naive, tiled and linear attention), ``sparse_attention`` (sliding-window and block-sparse
attention), ``measure`` (the peak extra memory of a call), ``translation`` (a synthetic
language pair with gold word alignments, notebook 07), ``corpus`` (a loader for
tab-separated sentence pairs), ``mt_metrics`` (BLEU through sacrebleu, alignment error rate),
``pretrained`` (all-MiniLM-L6-v2 run by the course's own encoder, notebook 11),
``interpret`` (head scores and attention rollout), ``plotting``, ``widgets``, and the
subpackage ``exercises`` (the checking harness, one checker module per notebook, and
``exercises.student``, which writes the notebooks without solutions). ``_validate`` holds
input checks shared by the modules.
"""

__version__ = "0.1.0"
