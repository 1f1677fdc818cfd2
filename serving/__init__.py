"""Serving: the policy server on vLLM with gRPC and OpenAI-compatible APIs, recording and hot-swap."""
