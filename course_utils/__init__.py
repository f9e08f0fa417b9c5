"""Attention from Scratch: the tested helpers that the course notebooks import.

Modules, one concern each: ``attention`` (scores, masked softmax, attention), ``data``
(seeded synthetic tasks and batches), ``training`` (seeding, device, the training loop),
``plotting``, ``widgets`` and ``checks`` (exercise checkers).
"""

__version__ = "0.1.0"
