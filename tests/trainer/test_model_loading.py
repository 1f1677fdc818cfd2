"""Policies loaded from several threads at once (the gate workers of a trainer with tenant groups) come back whole:
every parameter materialised and equal to a load made alone (liverl/io/model_loading.py). Without the lock, four
threads loading a tiny policy left parameters on the meta device in most loads."""

from __future__ import annotations

import threading

import torch

from trainer.io.policy_io import load_policy

THREADS, LOADS = 4, 3


def test_policies_loaded_from_several_threads_at_once_are_whole(tmp_path):
    from demo.policy.tiny_policy import build_policy

    folder = build_policy(tmp_path / "policy", ["edit", "search", "done"], arch="llama")
    alone = dict(load_policy(folder).named_parameters())
    start, failures = threading.Barrier(THREADS), []

    def load_many() -> None:
        start.wait()  # every thread starts loading at the same moment
        for _ in range(LOADS):
            params = dict(load_policy(folder).named_parameters())
            meta = [name for name, param in params.items() if param.is_meta]
            differ = [name for name, param in params.items()
                      if not param.is_meta and not torch.equal(param.detach(), alone[name].detach())]
            if meta or differ or params.keys() != alone.keys():
                failures.append(f"meta {meta[:3]}, different {differ[:3]}")

    threads = [threading.Thread(target=load_many) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
