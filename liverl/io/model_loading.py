"""One Hugging Face model load at a time in a process.

`from_pretrained` builds the model's modules on the meta device and then fills them in, through context managers
that patch torch process-wide. Two threads loading at once see each other's patches: a model comes back with some
parameters still on the meta device, silently (the gate then fails with "Tensor.item() cannot be called on meta
tensors", or worse, judges a half-loaded model). The trainer's gate workers (one per tenant group) load their
candidates and champions beside each other, and a server may start several hf engines at once, so every model load in
the trainer and in serving's hf engine holds this lock. tests/trainer/test_model_loading.py loads from several threads
and checks the weights.
"""

from __future__ import annotations

import threading

MODEL_LOADING = threading.RLock()  # reentrant: an adapter's load holds it around its base's load
