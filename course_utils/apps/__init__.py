"""The course's applications, the data sets they read, three experiments and the protocol.

| module          | kind        | what it holds                                                | notebook |
|-----------------|-------------|--------------------------------------------------------------|----------|
| translation     | application | a synthetic language pair with gold alignments; GRU models   | 07       |
| summarisation   | application | the pointer-generator with coverage                          | 08       |
| captioning      | application | CNN encoder, LSTM decoders with spatial / channel / no attn. | 09       |
| speech          | application | Listen, Attend and Spell and its baseline                    | 10       |
| memory          | application | associative recall, end-to-end memory networks               | 14       |
| vqa             | application | a question attending over image regions, and its baselines   | 15       |
| rationales      | application | a task whose reason is known; an attention-pooling classifier| 16       |
| corpus          | data set    | a loader for real tab-separated sentence-pair files          | 07       |
| news            | data set    | news-like reports with rare names; a JSON-lines loader       | 08       |
| scenes          | data set    | digit scenes with captions and boxes; a captioning folder    | 09, 15   |
| audio           | data set    | spoken digits (stored clips), a WAV-folder loader, log-mels  | 10       |
| stories         | data set    | bAbI-like stories with supporting facts                      | 14       |
| questions       | data set    | questions about the digit scenes with their answers          | 15       |
| summary_trace   | experiment  | one decoding step of the summariser, traced                  | 08       |
| contrastive     | experiment  | a tiny CLIP on the scenes' captions                          | 15       |
| similarity      | experiment  | MiniLM's similarity explained by word; head ablation         | 16, 18   |
| protocol        | protocol    | what every application offers notebook 12; by difficulty     | 12       |
| registry        | protocol    | the eight applications (reversal, 07-10, 14-16) behind it    | 12       |

An **application** module holds its data pipeline, models and measures, with its own
``make_splits`` / ``build_model(attention)`` / ``evaluate`` taking the options its notebook
needs (counts, kinds, switches). :mod:`~course_utils.apps.registry` puts each of them, and
the reversal task of notebooks 01 and 03, behind one protocol
(:class:`~course_utils.apps.protocol.Application`), so notebook 12 and
``scripts/compare_attention.py`` loop over all eight alike:
``APPLICATIONS[name].make_splits(seed, size)``, ``.build_model(attention, splits)``,
``.train(model, splits, seed, size)``, ``.evaluate(model, data)`` (the primary measure
first) and ``.difficulty(data)``. ``tests/test_apps_protocol.py`` runs it for every one.

A **data set** module generates or loads data for an application; an **experiment** is an
analysis one notebook runs. The building blocks (everything directly in
:mod:`course_utils`) never import from here.
"""
