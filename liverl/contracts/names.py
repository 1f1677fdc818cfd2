"""Names the stages agree on: schema versions, Kafka headers, registry aliases and lineage tags.

Topic, table and registry *locations* are configurable (liverl.config); these are the fixed keys.
"""

import re

# Bumped when SessionEvent or ModelCall change incompatibly; consumers dead-letter newer versions.
EVENT_SCHEMA_VERSION = 1

# Message headers on both topics (Kafka headers are bytes).
HEADER_SCHEMA_VERSION = "liverl-schema-version"
HEADER_TENANT = "liverl-tenant"
HEADER_KIND = "liverl-kind"  # "session-event" | "model-call" | "dead-letter"
# The value is sealed (liverl.privacy.sealing) with the key of the subject this header names (a pseudonym).
HEADER_SEALED = "liverl-sealed"

# gRPC metadata keys / HTTP headers (lower case, as gRPC requires).
META_SESSION_ID = "x-liverl-session-id"
META_AGENT_ROLE = "x-liverl-agent-role"  # "single" | "orchestrator" | "subagent"
META_AGENT_ID = "x-liverl-agent-id"
META_TENANT = "x-liverl-tenant"
META_USER_ID = "x-liverl-user-id"  # the end user: serving records no call of a user in ingest.opt_out_users
META_POLICY_VERSION = "x-liverl-policy-version"  # response header: the version that served
META_REQUEST_ID = "x-liverl-request-id"  # response header: the recorded ModelCall's request id (= the reply's id)

# Registry aliases: the trainer sets `candidate`, the promotion gate moves `champion`, serving follows one.
ALIAS_CANDIDATE = "candidate"
ALIAS_CHAMPION = "champion"
# A tenant with an adapter of its own has its own pair of aliases (the trainer sets and its gate moves them; serving
# follows each tenant's champion); tenants without one share `candidate` / `champion`, the shared policy.
TENANT_NAME = re.compile(r"[a-z0-9-]{1,40}")  # usable in an alias, a path and a peft adapter name
TAG_TENANT = "liverl.tenant"  # on a tenant adapter's versions: the tenant it was trained for (absent: shared)


def check_tenant_name(tenant: str) -> str:
    """The tenant, when its name can be used in an alias: 1 to 40 lowercase letters, digits and '-'."""
    if not isinstance(tenant, str) or TENANT_NAME.fullmatch(tenant) is None:
        raise ValueError(f"tenant {tenant!r} cannot name a per-tenant alias: use 1 to 40 lowercase letters, digits "
                         "or '-'")
    return tenant


def tenant_champion_alias(tenant: str) -> str:
    """The alias of the tenant's champion adapter, `champion-<tenant>`; ValueError for a name unfit for an alias."""
    return f"{ALIAS_CHAMPION}-{check_tenant_name(tenant)}"


def tenant_candidate_alias(tenant: str) -> str:
    """The alias of the tenant's newest registered adapter, `candidate-<tenant>`."""
    return f"{ALIAS_CANDIDATE}-{check_tenant_name(tenant)}"


def canary_alias(base: str, tenant: str | None = None) -> str:
    """The canary alias serving follows for a group, and the trainer's gate sets (trainer/gate/canary.py): `base`
    (serving.canary_alias, trainer.gate.canary_alias) for the shared policy, `<base>-<tenant>` for a tenant's."""
    return f"{base}-{check_tenant_name(tenant)}" if tenant else base

# Tags on every registered policy version (lineage). Values are strings; JSON where structured.
TAG_TABLE_VERSIONS = "liverl.table_versions"  # JSON list of trajectory-table versions trained on
TAG_KAFKA_OFFSETS = "liverl.kafka_offsets"  # JSON {topic: {partition: [first, last_exclusive]}}
TAG_REWARD_CONFIG_VERSION = "liverl.reward_config_version"
TAG_PARENT_VERSION = "liverl.parent_version"  # the registry version training started from
TAG_CODE_VERSION = "liverl.code_version"  # git commit of the trainer, or the package version
TAG_TRAJECTORIES = "liverl.trajectories"  # how many trajectories the version was trained on
TAG_TRAINER_STEP = "liverl.trainer_step"
TAG_GATE_DECISION = "liverl.gate.decision"  # "pass" | "fail" | "defer" (too little evidence: neither)
TAG_GATE_REPORT = "liverl.gate.report"  # JSON figures behind the decision
TAG_SERVING_ROLLBACK = "liverl.serving.rollback"  # set by serving when it rolled a version back
# Set by `liverl forget --exclude-versions` on versions trained on an erased subject's data (the value: the
# erasure's id); the trainer's gate never promotes such a version.
TAG_ERASURE_EXCLUDED = "liverl.erasure.excluded"

# Delta Lake commit metadata written by the pipelines with each batch.
COMMIT_BATCH_ID = "liverl.batch_id"
COMMIT_KAFKA_OFFSETS = "liverl.kafka_offsets"  # same JSON shape as TAG_KAFKA_OFFSETS
COMMIT_SCHEMA_VERSION = "liverl.table_schema_version"
# Delta application-transaction id of the distiller: its version is the batch sequence number.
DISTILL_APP_ID = "liverl-distill"

# The files of an exported policy (a Hugging Face folder that serving loads and the trainer writes).
POLICY_ARTIFACT_PATH = "policy"

# What kind of weights a registered version holds, and for an adapter the base version it applies to.
TAG_WEIGHTS_KIND = "liverl.weights"  # WEIGHTS_FULL | WEIGHTS_ADAPTER (absent: full, as before adapters)
WEIGHTS_FULL = "full"
WEIGHTS_ADAPTER = "adapter"
TAG_BASE_VERSION = "liverl.base_version"  # an adapter's base policy version (the folder it is applied to)
TAG_SIGNATURE = "liverl.signature"  # Ed25519 signature of the version's files and gate verdict (liverl/io/signing.py)
# The same over the decision "canary": the gate put this deferred candidate on its canary alias (trainer/gate/canary.py)
TAG_CANARY_SIGNATURE = "liverl.canary_signature"
