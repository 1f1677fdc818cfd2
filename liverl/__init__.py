"""liverl: reinforcement learning from production agent traffic.

This package holds only what the stages share: the generated wire types (`liverl.v1`), the names
of topics, tables and registry entries (`liverl.names`), the trajectory table schema
(`liverl.table_schema`), the config types (`liverl.config`) and the `liverl` CLI that dispatches to
the stages. Stages never import each other.
"""

__version__ = "0.1.0"
