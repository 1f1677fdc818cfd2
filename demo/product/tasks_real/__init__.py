"""Tasks for a real pretrained policy (SmolLM2-135M-Instruct): coding, search, orchestrator, with verifiable outcomes.

Unlike demo.product.tasks (a word grammar for the tiny demo policy) these speak chat: see base.py for the
interface, generate.py for the training generator and the held-out set, evaluate.py for the held-out evaluator.
"""
