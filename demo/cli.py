"""CLI entry (placeholder until the stage lands)."""


def add_arguments(parser) -> None:
    pass


def run(config, args) -> int:
    raise NotImplementedError("this command is being built")
