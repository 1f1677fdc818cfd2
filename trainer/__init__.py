"""Trainer: continuous off-policy-corrected RL on DeepSpeed, registration with lineage, promotion gate.

The stage's rule: the trainer imports only `liverl.*` (contracts, config, liverl.io, liverl.rewards) and
its own modules, never another stage; it meets them through the trajectory table and the MLflow registry.

`liverl train --follow`, from the command line to the registry:

    trainer/cli.py              parse, build a Trainer, trainer.start(), trainer.run(follow=True)
    trainer/loop.py             Trainer.run: load_batch -> step -> maybe_checkpoint -> maybe_publish, per tenant
                                group (one, `_shared`, unless trainer.tenants.adapters names tenants)
    trainer/io/publish.py       CheckpointPublisher.publish: register the candidate with its lineage, judge it,
                                move the group's alias on a pass, record the verdict
    trainer/io/registry.py      Registry: versions, tags, aliases, downloads (MLflow)

The subpackages, by concern:

    trainer/step/    one optimizer step: which rows make it (builder, staleness, wait), the loss (losses,
                     advantages, rewarding, hacking), packing and batching, DeepSpeed (engine), the ranks
                     (ranks, rank_messages), the trainable policy (adapters)
    trainer/gate/    the promotion gate: held-out evidence (holdout, scoring, general_text), the verdict and its
                     statistics (promotion, statistics), judging beside training (worker), the product's own
                     evaluator (online_eval, online_eval_process)
    trainer/groups/  tenant groups: which tenant trains in which group, their adapters on one base, their versions
    trainer/io/      what crosses the stage's edge: the base policy and its packages, exports and weight probes,
                     the registry and publishing, signing, lineage, the table's row stream, the state file

On several ranks (torchrun or the deepspeed launcher) rank 0 alone reads the table, writes the state, exports,
registers and runs the gate; it broadcasts each step's plan and each verdict (step/ranks.py), and every rank trains
its share of the step's micro-batches (step/training_step.py).
"""
