"""A fleet of three replicas following one alias, under continuous load: a rolling swap in place (canary
first, at most max_unavailable updating at any instant, no failed request), then a version that passes its
smoke but fails on real traffic is rolled back on every replica that took it.

Replicas are PolicyServers on threads of one process (tests/serving/conftest.py), coordinated only
through the real MLflow registry, as separate machines would be.
"""

import shutil
import threading
import time

import grpc
import pytest

from liverl.contracts import names
from liverl.v1 import common_pb2, serving_pb2, serving_pb2_grpc
from serving.swap.fleet import TAG_CANARY_TOOK
from tests.serving.conftest import ServerThread, register_version, serving_config, set_alias, version_tags, wait_for

SHORT = [2, 60, 61]
LONG = [2] + [60, 61] * 30  # 61 tokens: positions the bad version cannot serve
POISONED_FROM = 40


@pytest.fixture(scope="module")
def bad_policy_dir(second_policy_dir, tmp_path_factory):
    """second_policy_dir with NaN position embeddings from position 40: it passes the smoke generation (a
    few tokens) and short prompts, and fails every request that reaches position 40."""
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("policy") / "bad"
    shutil.copytree(second_policy_dir, out)
    weights = load_file(out / "model.safetensors")
    weights["transformer.wpe.weight"][POISONED_FROM:] = float("nan")
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    return out


def _config(stack, tmp_path, model, replica, **serving):
    return serving_config(stack, tmp_path / replica, model, replica_id=replica, record=False, watch_interval_s=0.3,
                          probation_s=300.0, probation_min_requests=3, max_error_rate=0.05, max_unavailable=1,
                          **serving)


def _max_concurrent(windows):
    """The most (start, end) windows open at one instant."""
    edges = sorted([(start, 1) for start, _ in windows] + [(end, -1) for _, end in windows], key=lambda e: (e[0], e[1]))
    open_now = most = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most



class Load:
    """Client threads sending short prompts round-robin to every replica until stopped."""

    def __init__(self, targets, threads=3):
        self.channels = [grpc.insecure_channel(t) for t in targets]
        self.stubs = [serving_pb2_grpc.PolicyServiceStub(c) for c in self.channels]
        self.results = []  # (replica index, version, latency s)
        self.failures = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(threads)]

    def _run(self, n):
        i = n
        while not self._stop.is_set():
            replica = i % len(self.stubs)
            request = serving_pb2.GenerateRequest(prompt_token_ids=SHORT, session_id=f"fleet-{n}",
                                                  sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=4,
                                                                                     seed=i + 1))
            started = time.monotonic()
            try:
                response = self.stubs[replica].Generate(request, timeout=60)
                self.results.append((replica, response.policy_version, time.monotonic() - started))
            except grpc.RpcError as error:
                self.failures.append((replica, error.code(), error.details()))
            i += 1

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join()
        for channel in self.channels:
            channel.close()


def test_rolling_swap_and_fleet_wide_rollback_under_load(stack, tmp_path, tiny_policy_dir, second_policy_dir,
                                                         bad_policy_dir):
    model = f"fleet-{tmp_path.name}"
    configs = [_config(stack, tmp_path, model, "r0", fleet_canary=True), _config(stack, tmp_path, model, "r1"),
               _config(stack, tmp_path, model, "r2")]
    register_version(configs[0], tiny_policy_dir, (names.ALIAS_CHAMPION,))
    with ServerThread(configs[0]) as r0, ServerThread(configs[1]) as r1, ServerThread(configs[2]) as r2:
        replicas = [r0, r1, r2]
        rollouts = [r.server.rollout for r in replicas]
        wait_for(lambda: rollouts[0].fleet.canary_lease.holders() == ["r0"], 30, "the canary's lease")

        # 1. A good version rolls out in place, canary first, one replica at a time, nothing fails.
        with Load([r.grpc_target for r in replicas]) as load:
            time.sleep(1.0)
            good = register_version(configs[0], second_policy_dir)
            set_alias(configs[0], names.ALIAS_CHAMPION, good)
            wait_for(lambda: all(r.server.router.champion.version == good for r in replicas), 120, "the rollout")
            seen = len(load.results)
            wait_for(lambda: len(load.results) >= seen + 30, 60, "requests after the rollout")

            # 2. A version that passes its smoke but fails on long prompts: it rolls out, then r2's probation
            # catches it, and the whole fleet rolls back in place.
            bad = register_version(configs[0], bad_policy_dir)
            set_alias(configs[0], names.ALIAS_CHAMPION, bad)
            wait_for(lambda: all(r.server.router.champion.version == bad for r in replicas), 120, "the bad rollout")
            failures_before_poison = list(load.failures)
            with grpc.insecure_channel(r2.grpc_target) as channel:
                stub = serving_pb2_grpc.PolicyServiceStub(channel)
                poisoned = 0
                while r2.server.router.champion.version == bad and poisoned < 50:
                    try:
                        reply = stub.Generate(serving_pb2.GenerateRequest(
                            prompt_token_ids=LONG, sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=4)),
                            timeout=60)
                    except grpc.RpcError:
                        poisoned += 1
                    else:  # the rollback landed between the check and the call: never served by the bad version
                        assert reply.policy_version != bad
                    time.sleep(0.05)
            wait_for(lambda: all(r.server.router.champion.version == good for r in replicas), 120,
                      "the fleet-wide rollback")
            seen = len(load.results)
            wait_for(lambda: len(load.results) >= seen + 20, 60, "requests after the rollback")
            rollout_state = [(s.shared.update_windows, list(r.lines)) for s, r in zip(rollouts, replicas)]
            info = [serving_pb2_grpc.PolicyServiceStub(c).ModelInfo(serving_pb2.ModelInfoRequest(), timeout=10)
                    for c in load.channels]
            pauses = [r.server.metrics.value("liverl_serving_swap_pause_seconds_sum") for r in replicas]

    windows = [w for state, _ in rollout_state for w in state]
    lines = [line for _, replica_lines in rollout_state for line in replica_lines]
    latencies = sorted(latency for _, _, latency in load.results)
    print(f"\nfleet: {len(load.results)} requests, {len(load.failures)} failed, {len(windows)} updates, "
          f"max concurrent {_max_concurrent(windows)}, p50 {latencies[len(latencies) // 2] * 1000:.0f} ms, "
          f"max {latencies[-1] * 1000:.0f} ms, total pause per replica {[round(p, 3) for p in pauses]} s, "
          f"poisoned requests {poisoned}")

    assert failures_before_poison == [] and load.failures == []  # the load's short prompts never failed
    assert _max_concurrent(windows) == 1  # max_unavailable
    assert {info.policy_version for info in info} == {good}
    for n, (_, replica_lines) in enumerate(rollout_state):
        served = {version for replica, version, _ in load.results if replica == n}
        assert served == {"1", good, bad}, (n, served)
        assert any(line.startswith(f"serving swap version={good} previous=1") and "mode=in_place" in line
                   for line in replica_lines)
        assert any(line.startswith(f"serving rollback version={good} from={bad}") for line in replica_lines), \
            (n, replica_lines)
    # The canary took each version before any other replica started updating to it.
    first_update = [min(start for start, _ in state) for state, _ in rollout_state]
    assert first_update[0] == min(first_update)
    assert "r0" in version_tags(configs[0], good)[TAG_CANARY_TOOK]
    tag = version_tags(configs[0], bad)[names.TAG_SERVING_ROLLBACK]
    assert "error-rate" in tag
    assert any("reason=fleet" in line for line in lines)
