"""The demo's evaluator: policies play held-out product tasks, paired on the same tasks and random numbers.

    python -m demo.evaluate gate ...      the toy policy: outcome reward and hacking monitors, candidate against
                                          champion (the trainer gate's online evidence, paired_reward.py)
    python -m demo.evaluate heldout ...   a chat policy (SmolLM2): success per family with Wilson intervals and the
                                          general-text NLL, base against a trained adapter (heldout_success.py)
    python -m demo.evaluate power R.json  from a paired heldout result (of the dev split), how wide another plan's
                                          interval would be: tasks x seeds (power.py)

The first two draw held-out work that no training session shares and share the statistics in stats.py.
"""
