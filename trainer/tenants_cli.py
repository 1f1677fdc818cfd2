"""`liverl tenants`: each tenant's champion adapter and the history of its versions, from the registry.

    liverl tenants                 every tenant with an adapter version or alias of its own, and the shared policy
    liverl tenants --tenant acme   one tenant
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from liverl.config import LiverlConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", metavar="T", help="show this tenant only")


def run(config: LiverlConfig, args: argparse.Namespace) -> int:
    from liverl.contracts import names
    from liverl.io.registry import ModelRegistry
    from trainer.groups.tenant_registry import tenant_histories

    registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
    histories = tenant_histories(registry)
    shared = registry.alias_version(names.ALIAS_CHAMPION)
    if args.tenant is not None:
        if args.tenant not in histories:
            print(f"tenant {args.tenant!r} has no adapter version in {registry.name!r} (known: "
                  f"{', '.join(histories) or 'none'}); it is served the shared policy v{shared}; name it in "
                  "trainer.tenants.adapters to train one")
            return 1
        histories = {args.tenant: histories[args.tenant]}
    else:
        print(f"shared policy | champion v{shared or '-'} | candidate v{registry.alias_version(names.ALIAS_CANDIDATE) or '-'}")
    for history in histories.values():
        print("\n".join(history.lines(shared)))
    return 0
