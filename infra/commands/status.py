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
        from liverl.io.registry import RegistryUnavailable

        try:
            console.print(_loop_state(config))
            if (pending := _pending_state(config)) is not None:
                console.print(pending, markup=False, highlight=False, soft_wrap=True)
        except RegistryUnavailable as error:  # healthy a moment ago; say what failed rather than a traceback
            console.print(str(error), style="red", markup=False, highlight=False)
            return 1
    return 0 if healthy else 1


def _loop_state(config) -> str:
    """The registry's versions and aliases, and the trajectory table's latest version."""
    from liverl.io.registry import ModelRegistry
    from liverl.io.table_history import TableHistory

    registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
    versions = registry.versions()
    aliases = registry.aliases()
    latest = TableHistory(config.table.trajectories_uri).latest_version()
    table = "no trajectory table yet" if latest is None else f"table v{latest}"
    alias_text = ", ".join(f"{alias} v{v}" for alias, v in sorted(aliases.items())) or "no aliases"
    return f"registry {registry.name}: {len(versions)} versions ({alias_text}); {table}"


def _pending_state(config) -> str | None:
    """Sessions the distiller's last batch held back: how many, the oldest one's age now, the horizon holding them,
    and why nothing comes out when that is so (pipelines/pending.py). None before the first batch."""
    import json
    import time

    from pipelines.pending import PendingSessions, duration
    from pipelines.table import COMMIT_DISTILL_SUMMARY, read_committed

    summary = json.loads(read_committed(config.table.trajectories_uri).metadata.get(COMMIT_DISTILL_SUMMARY, "{}"))
    pending = PendingSessions.from_summary(summary)
    if pending is None:
        return None
    now_ms = int(time.time() * 1000)
    age = pending.oldest_age_s(now_ms)
    if not pending.sessions:
        return f"distiller: no sessions pending (pipelines.reward_horizon_s {duration(pending.reward_horizon_s)})"
    text = (f"distiller: {pending.sessions} sessions pending" + (f", the oldest {duration(age)} old" if age else "")
            + f"; held until pipelines.reward_horizon_s {duration(pending.reward_horizon_s)} after their end "
              f"(or pipelines.idle_timeout_s {duration(pending.idle_timeout_s)} idle)")
    warning = pending.warning(emitted=summary.get("sessions"), now_ms=now_ms)
    return text + (f"\n{warning}" if warning else "")


def _mark(flag: bool) -> str:
    return "[green]yes[/]" if flag else "[red]no[/]"
