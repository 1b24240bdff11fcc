"""The producer side and the shared schema: settings, models, corpus reading, submit, the CLI.

Nothing here imports vLLM or torch, so `summarize submit` starts in well under a second.
"""
