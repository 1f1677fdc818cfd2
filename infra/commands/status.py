"""`liverl status`: the embedded stack's processes and their health."""


def add_arguments(parser) -> None:
    pass


def run(config, args) -> int:
    from rich.console import Console
    from rich.table import Table

    from infra.embedded.stack import status

    rows = status(config)
    if not rows:
        print(f"no stack recorded under {config.stack.data_dir}; start one with `liverl up`")
        return 1
    table = Table("service", "pid", "address", "alive", "healthy", "log")
    for row in rows:
        table.add_row(row["name"], str(row["pid"]), row["address"], _mark(row["alive"]), _mark(row["healthy"]),
                      row["log"])
    Console().print(table)
    return 0 if all(row["healthy"] for row in rows) else 1


def _mark(flag: bool) -> str:
    return "[green]yes[/]" if flag else "[red]no[/]"
