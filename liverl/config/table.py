"""Where the trajectory table and the dead-letter table live (any fsspec/object-store URI)."""

from liverl.config.section import Section


class TableConfig(Section):
    trajectories_uri: str | None = None
    """Delta table of trajectories (liverl.contracts.table_schema.TRAJECTORY_SCHEMA); default: <data_dir>/tables/trajectories."""
    dead_letters_uri: str | None = None
    """Delta table of events and sessions the pipelines could not use; default: <data_dir>/tables/dead_letters."""
