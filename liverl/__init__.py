"""liverl: reinforcement learning from production agent traffic.

The rule: the four stages (ingest, serving, pipelines, trainer) never import each other. They share
exactly two kinds of code, both here, and nothing stage-specific:

- **contracts**, what two stages must agree on to talk at all: the generated wire types
  (`liverl.v1`, from `proto/`), fixed names and the trajectory table's schema and typed row
  (`liverl.contracts`), and the typed config tree (`liverl.config`);
- **one small infrastructure library** (`liverl.io`) that every stage uses the same way: the durable
  spool, the Kafka writer behind it, the registry client with one set of alias semantics, the
  lineage codec, the table history reader and process helpers.

The reward library (`liverl.rewards`) is a package of its own because both the pipelines (labelling)
and the trainer (mixing on its own schedule) need it. Test doubles and fixture builders live under
`tests/` or `demo/`. `liverl.cli` is the one CLI, dispatching to the stages' light entry modules.
"""

__version__ = "0.1.0"
