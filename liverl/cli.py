"""`liverl`: one CLI, a subcommand per job. Config is parsed before any heavy import, so --help is instant.

    liverl <command> [@ config.toml] [command flags] [--section.field VALUE ...]

Each command lives in a light module of its stage exposing `add_arguments(parser)` and
`run(config, args) -> int`; torch, vLLM and Beam are imported only inside `run`. A module with config
sections of its own (the demo) names its tree in `config_schema()`, and one with settings of its own (`liverl demo`:
configs/demo.toml, or configs/demo-tenants.toml with --tenants N) names its file in `default_config_file(args)`,
read when no '@ file' or --config is given.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys
import threading
import traceback

# command -> (module, one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("infra.commands.up", "start the embedded stack (broker, MLflow) and record it"),
    "down": ("infra.commands.down", "stop every process `liverl up` started"),
    "status": ("infra.commands.status", "show the embedded stack and the loop's state"),
    "serve": ("serving.cli", "run the policy server (gRPC + OpenAI-compatible HTTP, hot-swap)"),
    "capture": ("ingest.cli", "run the capture service (the shadow backend)"),
    "distill": ("pipelines.cli", "distill Kafka into the trajectory table (one-shot or --follow)"),
    "train": ("trainer.cli", "train on the trajectory table and register checkpoints"),
    "retention": ("pipelines.retention", "delete table rows and traces past pipelines.*_retention_days, and vacuum"),
    "tenants": ("trainer.tenants_cli", "list each tenant's champion adapter and the history of its versions"),
    "import": ("ingest.import_cli", "publish existing agent traces (OpenAI logs, SWE-agent .traj, OTLP GenAI spans) as sessions"),
    "topics": ("infra.commands.topics", "print a topic's records as JSON lines, decoded and filtered by tenant/session"),
    "forget": ("infra.commands.forget", "erase a tenant, user or session from every store (keys, table, traces, state)"),
    "demo": ("demo.cli", "run the whole loop on the embedded stack with a demo agent product"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="liverl",
        description="Reinforcement learning from production agent traffic.",
        epilog="Config precedence: defaults < '@ file.toml' < LIVERL_SECTION__FIELD env < --section.field flags.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, description) in COMMANDS.items():
        sub = commands.add_parser(name, help=description, description=description)
        sub.add_argument("--config", metavar="FILE", help="TOML config file (same as '@ FILE')")
        importlib.import_module(module_name).add_arguments(sub)
    return parser


def split_argv(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """Separate '@ file', dotted config overrides (--a.b V) and the command's own flags."""
    own: list[str] = []
    overrides: list[str] = []
    config_file = None
    items = list(argv)
    while items:
        item = items.pop(0)
        if item == "@":
            if not items:
                raise SystemExit("liverl: '@' must be followed by a TOML config file")
            config_file = items.pop(0)
        elif item.startswith("--") and "." in item.split("=", 1)[0]:
            overrides.append(item)
            if "=" not in item and items:
                overrides.append(items.pop(0))
        else:
            own.append(item)
    return own, config_file, overrides


def command_config(args: argparse.Namespace, config_file: str | None, overrides: list[str]):
    """The command's config: its own schema, layered over '@ file' / --config, or over the file the command
    chooses itself when none is named (`default_config_file`: `liverl demo` reads configs/demo.toml)."""
    from liverl.config import load_config

    module = importlib.import_module(COMMANDS[args.command][0])
    schema = module.config_schema() if hasattr(module, "config_schema") else None
    chosen = args.config or config_file
    if chosen is None and hasattr(module, "default_config_file"):
        chosen = module.default_config_file(args)
    return load_config(chosen, overrides, **({"schema": schema} if schema else {}))


def main(argv: list[str] | None = None) -> int:
    own, config_file, overrides = split_argv(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
    try:
        config = command_config(args, config_file, overrides)
        return int(importlib.import_module(COMMANDS[args.command][0]).run(config, args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # the one clean exit wrapper: a message, not a stack, unless asked
        if os.environ.get("LIVERL_DEBUG"):
            traceback.print_exc()
        print(f"liverl {args.command}: error: {error}", file=sys.stderr)
        return 1


def console() -> None:
    """The `liverl` program: main(), then what a normal exit does (threads joined, exit handlers run), then the process ends with
    main's code without the interpreter's teardown. pyarrow and deltalake table scans leave native threads behind
    that abort a tearing-down process (SIGABRT, "terminate called without an active exception"): a command that
    had finished and printed its result exited 134 instead of its own code (tests/liverl/test_cli_exit.py)."""
    code = main()
    threading._shutdown()  # what a normal exit does first: executors stopped, other non-daemon threads joined
    atexit._run_exitfuncs()  # then MLflow's, logging's and tempfile's exit handlers
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`liverl ... | head`): nothing left to say
            pass
    os._exit(code)


if __name__ == "__main__":
    console()
