"""Provider adapters, one module each, imported lazily by the registry (`model_from_id`).

- `agentrt.model.providers.openai`: OpenAI-compatible Chat Completions over aiohttp (OpenAI,
  DeepSeek, DashScope, OpenRouter, Ollama, vLLM, LM Studio); needs ``agentrt[openai]``.
- `agentrt.model.providers.anthropic`: Anthropic Messages API; needs ``agentrt[anthropic]``.
- `agentrt.model.providers.gemini`: Google Gemini; needs ``agentrt[gemini]``.

Nothing is imported here, so importing this package costs nothing.
"""
