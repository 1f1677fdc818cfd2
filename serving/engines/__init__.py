"""The engines that generate: the interface (engine), vLLM (vllm_engine, its worker extension and CPU LoRA
patch), the light transformers engine for tests (hf_engine), LoRA slots for tenant adapters (lora_slots), and
the tokenizer shortcuts (tokens)."""
