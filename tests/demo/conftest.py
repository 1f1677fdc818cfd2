"""Demo fixtures: one fitted base policy shared by every demo test (a short fit keeps it cheap)."""

from __future__ import annotations

from pathlib import Path

import pytest

TEST_FIT_STEPS = 300  # enough for calls that parse; the demo fits longer


@pytest.fixture(scope="session")
def demo_base_policy(tmp_path_factory) -> Path:
    import torch

    from demo.policy import bootstrap_base_policy

    torch.set_num_threads(1)
    return bootstrap_base_policy(tmp_path_factory.mktemp("demo-policy") / "base", seed=0, fit_steps=TEST_FIT_STEPS)
