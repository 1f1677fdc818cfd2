"""Who is who in a session: each agent's role, from the role headers AND the session's spawn graph.

The role decides the loss mask (PARL trains the main agent, sub-agents are frozen observations), so a
missing header must never turn a sub-agent into a trainable agent. The rules, strongest first:

1. Spawned: an agent named by a SubAgentCreated, TaskAssigned or SubAgentFinished event of the session is a
   `subagent`, whatever its headers say (a sub-agent that orchestrates its own workers stays frozen).
2. Declared sub-agent: any of its model calls or events carrying AGENT_ROLE_SUBAGENT makes it a `subagent`.
3. Declared trainable: AGENT_ROLE_ORCHESTRATOR (else AGENT_ROLE_SINGLE) on its calls or events.
4. The main agent ("main", or an empty agent id) without a role: `orchestrator` when the session spawned
   sub-agents, `single` otherwise.
5. Any other agent id without a role and absent from the spawn graph is UNKNOWN: nothing says what it is,
   so it is never trained. Its trajectory becomes an `unknown_agent_role` dead letter (the product forgot
   the role header and the spawn events); the session's other agents are still emitted.
"""

from __future__ import annotations

from dataclasses import dataclass

from liverl.rewards.session import SessionRecord
from liverl.v1.common_pb2 import AgentRole

MAIN_AGENT_ID = "main"
SINGLE, ORCHESTRATOR, SUBAGENT = "single", "orchestrator", "subagent"
UNKNOWN = None  # no role can be inferred: dead-lettered, never trained
TRAINABLE_ROLES = frozenset({SINGLE, ORCHESTRATOR})

_SPAWN_BODIES = ("subagent_created", "task_assigned", "subagent_finished")


def agent_of(agent_id: str) -> str:
    """Producers may leave the agent id empty for the main agent."""
    return agent_id or MAIN_AGENT_ID


@dataclass(frozen=True)
class Spawn:
    parent: str | None  # the agent that created (or first assigned a task to) the sub-agent
    stage: int | None  # the orchestrator stage that first assigned it a task


def spawn_graph(session: SessionRecord) -> dict[str, Spawn]:
    """sub-agent id -> who spawned it and at which stage, for every sub-agent the session's events name."""
    parents: dict[str, str] = {}
    stages: dict[str, int] = {}
    named: list[str] = []
    for event in session.events:
        body = event.WhichOneof("body")
        if body not in _SPAWN_BODIES:
            continue
        subagent = getattr(event, body).subagent_id
        if not subagent:
            continue
        named.append(subagent)
        if body == "subagent_created":
            parents.setdefault(subagent, agent_of(event.agent_id))
        elif body == "task_assigned":
            parents.setdefault(subagent, agent_of(event.agent_id))  # created elsewhere: the assigner is the parent
            stages.setdefault(subagent, event.task_assigned.stage)
    # A SubAgentFinished is recorded by the sub-agent itself: it names the sub-agent, never its parent.
    return {agent: Spawn(parents.get(agent), stages.get(agent)) for agent in dict.fromkeys(named)}


def infer_roles(session: SessionRecord, agent_ids: list[str]) -> dict[str, str | None]:
    """agent id -> "single" | "orchestrator" | "subagent", or UNKNOWN (None), by the rules above."""
    graph = spawn_graph(session)
    declared: dict[str, set[int]] = {}
    for message in (*session.model_calls, *session.events):
        declared.setdefault(agent_of(message.agent_id), set()).add(message.agent_role)
    roles: dict[str, str | None] = {}
    for agent_id in agent_ids:
        said = declared.get(agent_id, set())
        if agent_id in graph or AgentRole.AGENT_ROLE_SUBAGENT in said:
            roles[agent_id] = SUBAGENT
        elif AgentRole.AGENT_ROLE_ORCHESTRATOR in said:
            roles[agent_id] = ORCHESTRATOR
        elif AgentRole.AGENT_ROLE_SINGLE in said:
            roles[agent_id] = SINGLE
        elif agent_id == MAIN_AGENT_ID:
            roles[agent_id] = ORCHESTRATOR if graph else SINGLE
        else:
            roles[agent_id] = UNKNOWN
    return roles
