"""The demo agent product on a real pretrained policy (SmolLM2-135M-Instruct): the tasks of
demo/product/tasks_real driven through serving's OpenAI HTTP API, recorded with the SDK."""
