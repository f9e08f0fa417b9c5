"""Attention from Scratch: the tested helpers that the course notebooks import.

Modules, one concern each: ``attention`` (scores, masked softmax, attention, multi-head
attention), ``data`` (seeded synthetic tasks and batches), ``training`` (seeding, device, the
training loop), ``seq2seq`` (the GRU encoder-decoder of notebook 01), ``bahdanau`` (the same
with additive attention, notebook 03), ``positional`` (sinusoidal, learned and rotary
positions), ``toy_models`` (small attention-only models whose heads can be read),
``transformer`` (the Transformer and a seq2seq model around it), ``efficient`` (tiled, linear,
sliding-window and block-sparse attention), ``translation`` (a synthetic language pair with
gold word alignments, notebook 07), ``corpus`` (a loader for tab-separated sentence pairs),
``mt_metrics`` (BLEU through sacrebleu, alignment error rate), ``pretrained``
(all-MiniLM-L6-v2 run by the course's own encoder, notebook 11), ``interpret`` (head scores
and attention rollout), ``plotting``, ``widgets``, ``exercises`` (exercise checkers, one module
per notebook) and ``student`` (notebooks without solutions).
"""

__version__ = "0.1.0"
