"""`liverl demo --tenants N`: the stages' config for N tenants with an adapter each, and the product's arms.

Each tenant has two arms, each a tenant id with its own capture token and serving API key:

    own      tenant id `<tenant>`          serving runs it on champion-<tenant> (the shared policy until one exists);
                                           its rows train the tenant's adapter (trainer.tenants.adapters)
    shared   tenant id `<tenant>-shared`   no adapter of its own: serving runs it on the shared champion, and its
                                           rows train the shared policy, as any tenant without an adapter does

So the control arm is served by the route every adapter-less tenant takes, with no switch added to serving for
the demo; the shared policy it measures learns from every tenant's control sessions (a policy for everyone), each
adapter from its tenant's own arm.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from demo.product.preferences import TenantProfile, tenant_profiles

OWN, SHARED = "own", "shared"
CONTROL_SUFFIX = "-shared"
CONFIG_FILE = "configs/demo-tenants.toml"


@dataclass(frozen=True)
class TenantArm:
    """One stream of a tenant's sessions. Produced by tenant_arms, consumed by the tenant traffic and the summary."""

    profile: TenantProfile
    arm: str  # OWN | SHARED
    tenant_id: str  # what capture and serving record the sessions as
    capture_token: str
    api_key: str
    share: float  # of the tenant's sessions

    @property
    def tenant(self) -> str:
        return self.profile.name


def tenant_arms(config) -> list[TenantArm]:
    """Both arms of each of the demo.tenants.count tenants, own arm first."""
    share = config.demo.tenants.control_share
    arms = []
    for profile in tenant_profiles(config.demo.tenants.count):
        for arm, tenant_id, arm_share in ((OWN, profile.name, 1.0 - share),
                                          (SHARED, profile.name + CONTROL_SUFFIX, share)):
            # Fresh secrets each run: a derivable token would let anyone who can reach a demo's ports write or
            # be served as its tenants (the stages get them through their config, never from a file).
            arms.append(TenantArm(profile, arm, tenant_id, secrets.token_urlsafe(24), secrets.token_urlsafe(24),
                                  arm_share))
    return arms


def tenant_mode_problems(config) -> list[str]:
    """What keeps the config from running tenants, each saying what to set instead (empty: it can)."""
    demo, problems = config.demo, []
    if demo.policy != "toy":
        problems.append(f'demo.policy is "{demo.policy}": the tenant demo runs the toy policy ("toy")')
    if demo.toy_arch != "llama":
        problems.append('demo.toy_arch must be "llama": vLLM serves LoRA adapters of Llama, not of GPT-2')
    if config.trainer.lora.enabled is not True:
        problems.append("trainer.lora.enabled must be true: a tenant's policy is a LoRA adapter on the shared base")
    if not config.serving.lora.enabled:
        problems.append("serving.lora.enabled must be true: serving runs each tenant's adapter on the shared engine")
    if config.trainer.gate.online_eval_command:
        problems.append("trainer.gate.online_eval_command must be empty: the toy evaluator plays the product's outcome, "
                        "not a tenant's preference")
    if demo.tenants.count > config.serving.tenants.max_resident_adapters:
        problems.append(f"serving.tenants.max_resident_adapters ({config.serving.tenants.max_resident_adapters}) is "
                        f"below demo.tenants.count ({demo.tenants.count}): raise it")
    return problems


def configure_tenants(config) -> list[TenantArm]:
    """Set what the stages need for the tenants (tokens, keys, adapters, watched aliases); ValueError naming every
    problem (and the config file that has none) when the rest of the config cannot run them."""
    problems = tenant_mode_problems(config)
    if problems:
        raise ValueError(f"demo.tenants.count = {config.demo.tenants.count} needs: " + "; ".join(problems)
                         + f" (or run `liverl demo --tenants N`, which reads {CONFIG_FILE})")
    arms = tenant_arms(config)
    config.ingest.tenant_tokens = {**config.ingest.tenant_tokens, **{a.tenant_id: a.capture_token for a in arms}}
    config.serving.api_keys = {**config.serving.api_keys, **{a.api_key: {"tenant": a.tenant_id} for a in arms}}
    tenants = [a.tenant for a in arms if a.arm == OWN]
    config.serving.tenants.watch = tenants
    config.trainer.tenants.adapters = tenants
    config.demo.run.serving_api_key = next(a.api_key for a in arms if a.arm == SHARED)  # ModelInfo: the shared policy
    return arms
