"""Trainer: continuous off-policy-corrected RL on DeepSpeed, registration with lineage, promotion gate.

The stage's rule: the trainer imports only `liverl.*` (contracts, config, liverl.io, liverl.rewards) and
its own modules, never another stage; it meets them through the trajectory table and the MLflow registry.

`liverl train --follow`, from the command line to the registry, in four files:

    trainer/cli.py       parse, build a Trainer, trainer.start(), trainer.run(follow=True)
    trainer/loop.py      Trainer.run: load_batch -> step -> maybe_checkpoint -> maybe_publish, per tenant group
                         (one, `_shared`, unless trainer.tenants.adapters names tenants: tenant_groups.py);
                         maybe_publish exports the weights and gathers the gate's evidence into a
                         CheckpointToPublish
    trainer/publish.py   CheckpointPublisher.publish(CheckpointToPublish) -> PublishResult: register the candidate with
                         its lineage, judge it (gate.evaluate), move `champion` on a pass, record the verdict
    trainer/registry.py  Registry: versions, tags, aliases, downloads (MLflow)

On several ranks (torchrun or the deepspeed launcher) rank 0 alone reads the table, writes the state, exports,
registers and runs the gate; it broadcasts each step's plan and each verdict (ranks.py), and every rank trains its
share of the step's micro-batches (training_step.py).

Beside that path: step_builder (which rows make a step, with staleness counted on served_lineage's champion
timeline), step_wait (when a group's step may start), training_step (one optimizer step), holdout (the gate's
evidence), gate (the verdict), state (what survives a crash), adapters and tenant_adapters (the policies trained).
"""
