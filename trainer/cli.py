"""`liverl train`: register a base policy, train once on what is new, or keep following the table.

    liverl train --init-from POLICY_DIR     # register the base version (candidate + champion); idempotent
    liverl train --init-from-package smollm2   # the same for a pretrained model shipped in a package (converted once)
    liverl train                            # train on every new table version once, register, exit
    liverl train --follow                   # keep following the table
    liverl train --trainer.tenants.adapters '["acme"]'   # an adapter per named tenant, one shared

Data-parallel ranks: start the same command under a launcher; rank 0 follows the table and publishes.

    torchrun --nproc-per-node 8 --no-python liverl train --follow
    deepspeed --num_gpus 8 --no_local_rank --module liverl.cli train --follow   # ranks from the environment
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from trainer.io.pretrained import PACKAGED_MODELS

if TYPE_CHECKING:
    from liverl.config import LiverlConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--init-from", metavar="DIR", help="register this HF policy folder as the base version")
    mode.add_argument("--init-from-package", metavar="NAME", choices=sorted(PACKAGED_MODELS),
                      help="convert the pretrained model this package ships (once, cached under the data dir) "
                           "and register it as the base version")
    mode.add_argument("--follow", action="store_true", help="keep following the table (stop with Ctrl-C / SIGTERM)")


def run(config: LiverlConfig, args: argparse.Namespace) -> int:
    from pathlib import Path

    _quiet_libraries()
    if args.init_from:
        from trainer.io.base_policy import register_base

        register_base(config, Path(args.init_from), say=_say)
        return 0
    if args.init_from_package:
        from trainer.io.base_policy import register_base
        from trainer.io.pretrained import ensure_converted, packaged_model, provenance_tags

        folder, provenance = ensure_converted(packaged_model(args.init_from_package), config.stack.data_dir, say=_say)
        register_base(config, folder, say=_say, provenance=provenance_tags(provenance))
        return 0
    import signal

    if config.trainer.torch_threads is not None:
        import torch

        torch.set_num_threads(config.trainer.torch_threads)
    from trainer.loop import Trainer

    trainer = Trainer(config, say=_say)

    def request_stop(signum: int, _frame: object) -> None:
        _say(f"signal {signum}: stopping after this step")
        trainer.stop_requested = True

    previous = signal.signal(signal.SIGTERM, request_stop)
    try:
        trainer.start()
        registered = trainer.run(follow=args.follow)
    finally:
        signal.signal(signal.SIGTERM, previous)
        trainer.close()
    trainer.say(f"trainer done | {trainer.steps_line()} | versions registered {registered}")
    return 0


def _quiet_libraries() -> None:
    """One dense line per step: no download bars or run links from the libraries in between."""
    import logging
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    logging.getLogger("mlflow").setLevel(logging.WARNING)


def _say(line: str) -> None:
    """One write per line: under a launcher the ranks share stdout, and print() writes the newline apart."""
    import sys

    sys.stdout.write(line + "\n")
    sys.stdout.flush()
