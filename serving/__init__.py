"""Serving: the policy server, the stage that answers the agent product and records what it sampled.

It loads the policy version the registry alias names (vLLM, or the light transformers engine in
tests), serves it over gRPC (PolicyService, PolicyAdmin, health) and the OpenAI-compatible HTTP API,
records every completion as a ModelCall (token ids, processed-distribution logprobs, the sampling
applied and the exact version) on Kafka, and hot-swaps versions as the alias moves. It is the edge
production traffic reaches: API keys fix each call's tenant, and every input is checked against its
contract before any work is spent on it.

The rule: serving imports only `liverl.*` (contracts, config, the shared io and redaction libraries)
and never another stage; it meets the others through Kafka topics and the MLflow registry.
"""
