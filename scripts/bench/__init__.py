"""Throughput benchmark: summarize's pipeline against vLLM by hand and a Hugging Face loop.

    python scripts/bench                       # all modes on ../shared/corpus/lee-background
    python scripts/bench --modes raw,pipeline  # just these
    python scripts/bench --modes raw,pipeline,pipeline,raw  # in turn: ratios over all runs
    python scripts/bench --corpus DIR --max-tokens 64 --docs 96

Modes, each on the same documents, model, profile and greedy sampling, one after another:
  raw       one LLM.generate call over every document at once (the ceiling), then one over
            the summaries that loop, with the settings that break loops: the same summaries
            the pipeline writes
  pipeline  the real path: `summarize submit` into Redis, a running `summarize worker`,
            rows in the database; timed from the first submit to the last row committed,
            with the model already loaded and warmed up on other documents
  hf        transformers `generate` in static batches, at the best of a few batch sizes
  submit    `summarize submit` alone on 100,000 small generated files: documents per
            second into Redis and the database, and its peak memory (also on 10,000 files,
            to show memory does not grow with the corpus)
  ceiling   the pipeline with the model taken out (SUMMARIZE_MODEL=echo, the instant engine):
            100,000 generated documents of 150 words (and 10,000) submitted, then drained by
            a real `summarize worker --burst`; Redis memory per queued document (INFO memory
            before and after submit), submit's rate, the worker's rate (first start to last
            row, from batch_stats) and its peak memory. SUMMARIZE_DATABASE_URL picks the
            database (default: SQLite in a temporary folder; a PostgreSQL database is
            emptied first, so it asks for --empty-database); the database's size per
            document (SUMMARIZE_KEEP_TEXTS=1 to keep texts). SUMMARIZE_IN_FLIGHT sets the
            worker's window as it does for users
  endtoend  one batch of 1,000,000 generated documents (--endtoend-docs) through every step
            a user runs, with the instant engine: `submit`, `worker --burst`, `status`,
            `results --format jsonl`; each step's wall time and peak memory
  startup   `summarize --help` in a fresh process: what every producer command pays first
  quality   the default model on the ACL papers of `aclsum` (train and validation splits:
            abstract, introduction and conclusion; the papers that fit one prompt), against
            their human summaries (challenge, approach, outcome): vLLM by hand with greedy
            decoding alone, with the summaries that loop generated again, and with the
            sentence limit as well (SUMMARIZE_MAX_SENTENCES), then the real pipeline
            (`submit --wait`, a running worker) scored by `summarize eval --json`; ROUGE of
            each beside the lead
            baseline, and the shares that loop, are cut at the length cap, and give a
            number the paper does not
  long      whole papers of aclsum's train split (--long-papers, 20), written as Markdown
            (title, abstract, section headings, paragraphs: many times the context), through
            the pipeline (parts and the combining pass) and `summarize eval`: how many end by
            `stop`, still loop, leak the instruction or say a sentence twice, ROUGE beside
            the lead baseline; then each paper's first part alone (the text of its first
            window), the same way: what the combining pass must beat
  hostile   files made to hurt a reader beside good ones, through `summarize submit`: its
            time and peak memory with its extraction processes
  pdfs      --pdfs-count PDFs submitted with one extraction process, with one a core, and
            with --baseline-tree's code (an earlier commit's worktree), in turn
  readers   the dashboards, `summarize status`/`batches` and each Grafana panel's query,
            median milliseconds over 5,000,000 rows of `results` (--readers-rows), made by
            submitting 100,000 generated documents, draining them with the instant engine,
            and submitting them again under other batch names (deduplicated at submit)
  peer      vLLM's own batch runner (`python -m vllm.entrypoints.openai.run_batch`, given the
            worker's engine settings) and `summarize run` (a first run, no sentence limit) on
            one OpenAI batch input file of the documents, each from start to exit, in turn,
            --peer-rounds times; the phases (start-up to the first document, generating,
            last write to exit) and the ratio of the walls; --peer-paragraphs N: N paragraphs
            of aclsum's train and validation papers instead (2,000: the engine dominates)
  parquet   --parquet-rows records (1,000,000) as one Parquet file and as JSON lines,
            each submitted (wall time, peak memory), then the batch drained by the instant
            engine and exported with `results --format parquet` and `--format jsonl`
  s3        --s3-objects text files (20,000) submitted from a local folder and as objects of
            a bucket of moto's S3 server on loopback, in turn (--s3-rounds, 2), each into a
            database of its own: wall time, peak memory, the ratio of the rates
  schema    the corpus (the first --docs) through `summarize run --schema` (--schema,
            samples/schemas/key-points.json) with the real engine and default settings: how
            many summaries parse as JSON and validate against the schema, how many were cut
  api       `summarize serve` driven by the official `openai` client beside `summarize submit`
            on one OpenAI batch input file: --api-requests requests (100,000, and a tenth)
            uploaded, created and validated, with the server's memory; and the round trip
            with the instant engine and a running worker (--api-round-trip, 20,000: upload,
            create, poll, download the output) beside `submit --wait` + `results --format
            openai`. `readers` times `GET /v1/batches/{id}` at its millions of rows too

It prints documents and output tokens per second for each mode, then one line of ratios:
`pipeline/raw=… raw/hf=… pipeline/hf=…`. A mode named more than once runs that often, and its
ratios count all its documents over all its seconds: one pair drifts with the machine (the
pairs in docs/performance.md), runs in turn less so. Settings (SUMMARIZE_PROFILE, SUMMARIZE_MODEL, …) are
read from the environment as the worker reads them.
"""
