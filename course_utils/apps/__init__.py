"""The course's applications, one module each: its data, any model of its own, and a protocol.

Every application module (today ``translation``, ``summarisation``, ``captioning`` and ``memory``;
speech and VQA follow) offers the same three functions, so notebook 12 can loop over all of them and
compare a model with attention against one without on equal terms:

* ``make_splits(...) -> {"train", "val", "test"}``: seeded data whose splits never overlap;
* ``build_model(attention: bool, **sizes) -> nn.Module``: the application's model with or
  without attention, otherwise alike, following :mod:`course_utils.decoding`'s protocol;
* ``evaluate(model, data) -> dict[str, float]``: the application's own measures on a split.

``corpus`` is not an application but the loader for real sentence-pair files that
``translation`` can be trained on instead of its generated language. The building blocks
(everything directly in :mod:`course_utils`) never import from here.
"""
