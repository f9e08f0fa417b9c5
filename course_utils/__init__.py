"""Attention from Scratch: the tested helpers that the course notebooks import.

This docstring is the course's glossary: every module and notebook writes shapes, masks and
hyperparameters the way it says, and the table at the end says where each concept lives.

Shapes
------
A tensor's shape is written with these letters; each letter means one thing everywhere::

    B       batch size
    S       source length: the keys / encoder memory a decoder attends over
    T       target length: decoder steps, the queries of a decoder
    L       length of a sequence attending to itself (self-attention, an encoder)
    Lq, Lk  query and key lengths where they are independent (``attention``)
    N, M    the same in ``efficient`` and ``sparse_attention``, whose subject is the cost
            as the length grows
    D       feature size of a query or key (per head, D = E / H); Dv that of a value
    E       model width, ``d_model`` (also the embedding size)
    H       number of heads
    F       feed-forward width, ``d_ff``
    R       recurrent (GRU or LSTM) state size, ``rnn_dim`` in every config and model
    A       additive-attention hidden size, ``attn_dim`` in every config and model; the
            public API fixes ``AdditiveScore(query_dim, key_dim, hidden_dim)``, the one
            place where A is called ``hidden_dim``
    V       vocabulary size
    K       beam size
    C       size of the encoder states an attention decoder reads (``enc_dim``; its
            context vectors have this size too)

``...`` stands for any leading batch dimensions. ``MultiHeadAttention`` writes its queries
``(B, L, E)``, its keys ``(B, S, E)`` and its weights ``(B, H, L, S)``, as the public API
does: L and S coincide in self-attention. Counts that are not lengths or widths are named
in words, never with a letter: ``(num_layers, B, H, L, L)`` for one attention tensor per
layer. In formulas, ``Q``, ``K``, ``V`` and ``W_q`` name matrices (queries, keys, values,
a projection), not sizes: ``softmax(Q K^T / sqrt(D)) V``.

Masks
-----
A mask is boolean and ``True`` means "this position may be attended to", in every module.
It broadcasts to the attention weights ``(..., Lq, Lk)``. A query whose row is fully
masked gets all-zero weights and a zero output, never NaN. A key-padding mask is ``(B, S)``
with ``True`` at real tokens, named ``src_mask`` from where a model builds it out of the
lengths (``data.lengths_to_mask``, also ``Batch.src_mask``) down to the attention; the
Transformer core takes it under PyTorch's names (``src_key_padding_mask``,
``memory_key_padding_mask``). A public function checks a mask it is given once, where it
enters; the softmax below trusts it. PyTorch's masks mean the opposite (``True`` =
blocked); ``attention.mask_from_torch`` converts them.

Names
-----
One name per hyperparameter: ``d_model`` (model width), ``num_heads``, ``d_ff``
(feed-forward width), ``num_layers``, ``dropout``, ``max_len`` (the longest input a table
or model holds) and ``max_steps`` (how many tokens a decoder may produce). PyTorch's names
(``nhead``, ``dim_feedforward``, ``embed_dim``) appear only inside the ``from_torch``
methods that read PyTorch modules, with one documented exception fixed by the course's
public API: ``attention.MultiHeadAttention(embed_dim, num_heads, bias=True)``.
``transformer.EncoderLayer(d_model, num_heads, d_ff, dropout)`` takes PyTorch's positional
order under the course's names, so that positional code written for ``torch.nn`` reads the
same.

Where each concept lives
------------------------
Building blocks sit at the top level. They never import ``widgets`` or the subpackages
(``exercises``, ``apps``), which are built from them. Notebooks are named by number.

| concept                                                              | module              | notebooks                |
|----------------------------------------------------------------------|---------------------|--------------------------|
| input checks shared by the modules, one message style                | _validate           | -                        |
| scores, masked softmax, masks, attention, one read, multi-head attn. | attention           | 02-06, 08-10, 14, 15, 17 |
| sinusoidal, learned, rotary positions; ALiBi, T5 relative bias       | positional          | 05, 17                   |
| vocabularies, sequence tasks, hash splits, batches, padding masks    | data                | 01, 03, 06, 07, 15       |
| the base of every model config: sizes and ids from the vocabularies  | config              | -                        |
| seeding, device, the training loop, losses, schedules, weight cache  | training            | every notebook           |
| a notebook's asserted learning targets, recorded runs, the rule      | claims              | 01,03-10,12-18           |
| running a notebook in nbclient: a limit per cell, no lost wake-ups   | run_notebook        | -                        |
| greedy and beam search for every model (the start / step protocol)   | decoding            | 01,03,06,07,09,10,12     |
| exact match, accuracy by length, BLEU, ROUGE, rare words, CER/WER    | metrics             | 01, 03, 06-10            |
| attention against gold: accuracy, AER, boxes, monotonic over time    | alignment           | 03, 07, 09, 10           |
| the GRU encoder-decoder (Seq2SeqConfig)                              | seq2seq             | 01, 03, 07               |
| the GRU decoder with additive (Bahdanau) attention (BahdanauConfig)  | bahdanau            | 03, 07                   |
| small attention-only models whose heads can be read                  | toy_models          | 04, 05, 18               |
| Transformer layers and the embedding-free core, from_torch           | transformer         | 06, 17                   |
| a Transformer seq2seq model with embeddings (TransformerConfig)      | transformer_seq2seq | 06, 07                   |
| naive, tiled ("flash") and linear attention (any feature map)        | efficient           | 13                       |
| Performer's random features (FAVOR+), estimating softmax attention   | random_features     | 13                       |
| sliding-window, block-sparse and hierarchical (coarse-to-fine) attn. | sparse_attention    | 13                       |
| a call's cost: peak memory, multiply-adds, Table 1, IO, a KV cache   | measure             | 04, 13, 17               |
| head scores, rollout, attention flow, linear probes                  | interpret           | 01, 04, 11, 16, 18       |
| heads removed (zero, mean), recorded and patched between inputs      | circuits            | 16, 18                   |
| gradient x input, integrated gradients, occlusion, rank correlation  | attribution         | 16                       |
| deletion curves, Jensen-Shannon, permuted and adversarial attention  | faithfulness        | 16                       |
| induction heads: repeated data, prefix matching, OV copying, paths   | induction           | 18                       |
| all-MiniLM-L6-v2 run by the course's own encoder                     | pretrained          | 11, 16, 18               |
| a fixed character vocabulary, the stdlib's source as text, bigrams   | stdlib_text         | 17                       |
| decoder-only LM (LMConfig), GQA, the KV cache, sinks, stored models  | language_model      | 17                       |
| temperature, top-k, top-p (nucleus); generating with a KV cache      | sampling            | 17                       |
| every matplotlib figure: heatmaps, views, curves, image overlays     | plotting            | all but 05,10,12,13,17   |
| every ipywidgets explorer                                            | widgets             | 00, 02, 04, 06, 11, 17   |
| the applications, their data sets, three experiments, the protocol   | apps                | 07-10, 12, 14-16, 18     |
| a synthetic language pair with gold word alignments                  | apps.translation    | 07                       |
| a loader for tab-separated sentence-pair files                       | apps.corpus         | 07                       |
| news-like reports with rare names, a JSON-lines loader, extended ids | apps.news           | 08                       |
| pointer-generator with coverage (See et al. 2017), summary protocol  | apps.summarisation  | 08                       |
| one decoding step by step: attention, p_gen, coverage, copies        | apps.summary_trace  | 08                       |
| digit scenes with captions and boxes, a captioning-folder loader     | apps.scenes         | 09, 15                   |
| CNN + LSTM captioners: spatial, channel, no attention; pointing      | apps.captioning     | 09, 15                   |
| spoken digits (stored clips), a WAV-folder loader, log-mel features  | apps.audio          | 10                       |
| Listen, Attend and Spell: pyramidal listener, speller, CER/WER       | apps.speech         | 10                       |
| bAbI-like stories with supporting facts, split-disjoint, as ids      | apps.stories        | 14                       |
| key-value memory read, associative recall, end-to-end memory network | apps.memory         | 12, 14                   |
| questions about digit scenes: answers, supporting boxes, held out    | apps.questions      | 15                       |
| VQA: question encoder, stacked glimpses, co-attention, grounding     | apps.vqa            | 15                       |
| a tiny CLIP: dual encoder, contrastive loss, caption -> scene search | apps.contrastive    | 15                       |
| the rationale task, an attention-pooling classifier, 5 attributions  | apps.rationales     | 16                       |
| MiniLM's similarity explained by word, a graded benchmark, ablation  | apps.similarity     | 16, 18                   |
| the protocol every application holds; runs, records, table rows      | apps.protocol       | 12                       |
| the eight applications behind the protocol, small and full sizes     | apps.registry       | 12                       |
| the exercise-checking harness                                        | exercises           | 01-18                    |
| checkers: GRU step, exact match                                      | exercises.nb01      | 01                       |
| checkers: masked softmax, attention, additive score, Nadaraya-Watson | exercises.nb02      | 02                       |
| checkers: attention read, alignment accuracy                         | exercises.nb03      | 03                       |
| checkers: split heads, multi-head attention, previous-token score    | exercises.nb04      | 04                       |
| checkers: sinusoidal encoding, offset rotation, rotary positions     | exercises.nb05      | 05                       |
| checkers: feed-forward block, label smoothing, warm-up rate          | exercises.nb06      | 06                       |
| checkers: BLEU's modified precision and brevity penalty              | exercises.nb07      | 07                       |
| checkers: the final distribution, a summary's coverage loss          | exercises.nb08      | 08                       |
| checkers: attention over a grid, the doubly stochastic term          | exercises.nb09      | 09                       |
| checkers: mel filterbank, pyramidal time reduction, monotonic share  | exercises.nb10      | 10                       |
| checkers: attention entropy, top-k search                            | exercises.nb11      | 11                       |
| checkers: online softmax, dilated window mask                        | exercises.nb13      | 13                       |
| checkers: key-value read, a memory-network hop, a rule-based reader  | exercises.nb14      | 14                       |
| checkers: stacked glimpses, left of a digit, peak in any box         | exercises.nb15      | 15                       |
| checkers: integrated gradients, precision at k, Jensen-Shannon ...   | exercises.nb16      | 16                       |
| checkers: Welch's standard error, a GRU model's parameters           | exercises.nb12      | 12                       |
| checkers: heads removed by hand, induction rule, eigenvalue copying  | exercises.nb18      | 18                       |
| checkers: min-p filter, windowed causal mask, cached attention step  | exercises.nb17      | 17                       |
| student copies of the notebooks, solutions removed (make lab)        | exercises.student   | -                        |
"""

__version__ = "0.1.0"
