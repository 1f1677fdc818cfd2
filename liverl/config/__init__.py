"""Config types shared by the stages, and the loader that layers defaults, file, env and CLI."""

from liverl.config.loading import load_config
from liverl.config.root import LiverlConfig

__all__ = ["LiverlConfig", "load_config"]
