"""The consumer side: the Celery app, the engine that owns `vllm.LLM`, and the drain loop."""
