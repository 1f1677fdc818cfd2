"""The stack's CLI commands: up, down, status (light modules; see liverl.cli)."""
