"""The course's applications, the data sets they read, and two experiments: one module each.

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

Every **application** offers the same three functions, so notebook 12 can loop over them and
compare a model with attention against one without on equal terms:

* ``make_splits(...) -> {"train", "val", "test"}``: seeded data whose splits never overlap;
* ``build_model(attention: bool, **sizes) -> nn.Module``: the application's model with or
  without attention, otherwise alike (the sequence models follow
  :mod:`course_utils.decoding`'s protocol; memory, vqa and rationales are classifiers);
* ``evaluate(model, data) -> dict[str, float]``: the application's own measures on a split.

Their signatures still differ in the sizes and options each takes (see each module). A
**data set** module generates or loads data for an application;
an **experiment** is an analysis one notebook runs. The building blocks (everything directly
in :mod:`course_utils`) never import from here.
"""
