"""`liverl status`: the embedded stack's processes and their health, then where the loop stands."""


def add_arguments(parser) -> None:
    pass


def run(config, args) -> int:
    from rich.console import Console
    from rich.table import Table

    from infra.embedded.stack import status

    console = Console()
    rows = status(config)
    if not rows:
        console.print(f"no stack recorded under {config.stack.data_dir}; start one with `liverl up`")
        return 1
    table = Table("service", "pid", "address", "alive", "healthy", "log")
    for row in rows:
        table.add_row(row["name"], str(row["pid"]), row["address"], _mark(row["alive"]), _mark(row["healthy"]),
                      row["log"])
    console.print(table)
    healthy = all(row["healthy"] for row in rows)
    if healthy:
        console.print(_loop_state(config))
    return 0 if healthy else 1


def _loop_state(config) -> str:
    """The registry's versions and aliases, and the trajectory table's latest version."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=config.mlflow.tracking_uri)
    name = config.mlflow.registered_model
    versions = client.search_model_versions(f"name='{name}'")
    aliases = {}
    for version in versions:
        for alias in version.aliases or []:
            aliases[alias] = version.version
    try:
        table = f"table v{DeltaTable(config.table.trajectories_uri).version()}"
    except TableNotFoundError:
        table = "no trajectory table yet"
    alias_text = ", ".join(f"{alias} v{v}" for alias, v in sorted(aliases.items())) or "no aliases"
    return f"registry {name}: {len(versions)} versions ({alias_text}); {table}"


def _mark(flag: bool) -> str:
    return "[green]yes[/]" if flag else "[red]no[/]"
