"""What every side of the pipeline shares, and imports nothing of theirs.

Settings and profiles; the errors that say the fix; the schema (`tables.py`) and the
database connection; every fact about messages in Redis (`queue.py`, `broker.py`) and
the sweep that puts stranded ones back (`requeue.py`); when texts are dropped
(`retention.py`); where the model's files are (`model.py`: no vLLM import).
"""
