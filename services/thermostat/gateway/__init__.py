"""The inference gateway: the OpenAI HTTP API at the edge's /openai/v1, waking the model pod on request (issue 34)."""
