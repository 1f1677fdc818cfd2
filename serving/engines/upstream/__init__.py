"""serving.engine = "upstream": the team's own OpenAI-compatible vLLM servers generate, liverl records.

liverl keeps owning text (chat templates, the policy's tokenizer, ModelCalls); each generation goes to a server as
prompt token ids (POST /v1/completions with return_token_ids), and the sampled ids and logprobs come back in the
response. engine.py is the Engine; wire.py speaks vLLM's HTTP API; fleet.py routes by health and pushes adapter
versions into every server. docs/upstream.md says how to deploy it.
"""
