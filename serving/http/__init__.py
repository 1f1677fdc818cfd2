"""Serving's OpenAI-compatible HTTP side: the app and its admin routes (api), the completion routes' ASGI front
(asgi_routes), their guards (guard, dependencies), the chat and completions handlers (completions, chat,
openai_schema) and the Responses API (responses/)."""
