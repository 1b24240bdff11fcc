"""`summarize serve`: OpenAI's Files and Batch API over the queue, for scripts written
against OpenAI's. Its batches are ordinary batches; what the API adds (keys, files, a
batch's owner and input file) is in the tables of migration 0012."""
