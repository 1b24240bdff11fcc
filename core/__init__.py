"""What every side of the pipeline shares, and imports nothing of theirs.

Settings and profiles; the errors that say the fix; the schema (`tables.py`) and the
database connection; the Redis that carries the queue (`broker.py`), our messages
(`messages.py`), Celery's configuration (`transport.py`), sending them (`producer.py`),
what Redis holds of them (`redis_state.py`), which workers are live (`presence.py`), and
the sweep that puts stranded ones back (`requeue.py`); when texts are dropped
(`retention.py`); where the model's files are (`model.py`: no vLLM import).
"""
