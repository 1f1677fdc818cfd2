"""The product's task families for a real chat model (SmolLM2-135M-Instruct): coding, search and orchestrator with
verifiable outcomes, spoken in chat messages instead of the toy policy's word grammar (demo.product.tasks).

base.py holds the interface, generate.py the training generator and the held-out set (disjoint by task key).
"""

from pathlib import Path

GENERAL_TEXT = Path(__file__).with_name("general_text.txt")
"""A fixed general text whose NLL tells how much general ability training has cost (the gate and the evaluator)."""
