"""The OpenAI Responses API (POST /v1/responses) on serving's HTTP side, recorded exactly like chat.

schema: the request and what is refused; items: input items to chat messages and the response object; api: the
handler and its stream events; state: the responses kept for previous_response_id (per tenant, bounded, expiring).
"""
