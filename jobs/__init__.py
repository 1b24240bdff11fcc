"""Files into Redis: read a corpus, record each document once, enqueue it (`summarize submit`),
and act on a batch afterwards (retry its failures, cancel what waits).

Nothing here imports vLLM or torch, so `summarize submit` starts in well under a second.
"""
