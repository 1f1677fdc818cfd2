"""Import a team's existing agent traces as liverl sessions (`liverl import`), so adoption starts with history.

    model.py        the format-neutral session (exchanges, tool runs, outcome) every reader produces
    openai_chat.py  OpenAI chat-completion logs (JSONL, request + response per line)
    swe_agent.py    SWE-agent .traj files
    otlp.py         OpenTelemetry GenAI spans as OTLP JSON (standalone: the capture service can reuse it)
    chat.py         message text, tool calls, and the prompt/completion text the tokenizer reads
    build.py        session -> redacted SessionEvents + ModelCalls (origin "import:<format>", no logprobs)
    publish.py      records keyed like the capture path's, through the shared KafkaWriter
    importer.py     the loop: read, build, publish, count (bad input is skipped and reported, never fatal)

Event ids are digests of the source (file content or log line or span id) and the position in it, so
importing the same source again publishes the same ids and the pipelines' per-tenant dedupe drops them.
"""
