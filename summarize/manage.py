"""Commands that read batches and act on them after submit: `status`, `batches`, `results`,
`retry`, `cancel`, `purge`, `eval`, `requeue`.

Registered on the `summarize` group by summarize/cli.py; errors cross into the CLI there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from core.errors import SummarizeError
from core.storage import is_url
from core.tables import STATUSES, Status
from readers.terminal import counted, say
from summarize.options import DAY_S, LATEST, Seconds


def database_of(ctx: click.Context):
    """The settings and the database of a command that reads it (it never makes one)."""
    from core import database
    from core.settings import Settings

    settings = Settings.for_command(ctx)
    return settings, database.existing(settings)


def listed(ctx: click.Context):
    """The settings and the database for a listing of batches (`status`, `batches`); with no
    database yet, None, after saying so (the listing is then empty)."""
    from core.errors import NoDatabase

    try:
        return database_of(ctx)
    except NoDatabase as exc:
        from core.settings import Settings

        say(str(exc), err=True)
        return Settings.for_command(ctx), None


def known(db, batch: str) -> None:
    """Refuse a batch name the database does not hold."""
    from readers import export

    if not export.exists(db, batch):
        raise SummarizeError(f"No batch named {batch!r}: `summarize batches` lists them.")


@click.command()
@click.option("--batch", metavar="NAME", help="Only this batch.")
@click.option("--status", type=click.Choice(STATUSES), help="Only rows with this status.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "csv", "openai", "parquet"]),
    default="jsonl",
    show_default=True,
    help="openai: OpenAI Batch output lines (succeeded rows; with --errors-only, the error "
    "file); parquet: typed columns.",
)
@click.option("--errors-only", is_flag=True, help="Only failed, cancelled and expired rows.")
@click.option(
    "--output",
    metavar="FILE|URL",
    help="Write to FILE or to an object-store URL (s3://bucket/key, ...), whole or not at all "
    "(a temporary file or object, then renamed), not to standard output.",
)
@click.pass_context
def results(
    ctx, batch: str | None, status: str | None, fmt: str, errors_only: bool, output: str | None
) -> None:
    """Stream rows of the results table to standard output, one per line (or CSV).

    Rows stream in pages from the database, so a million rows need no more
    memory than ten. jsonl and csv write every column of `results`; parquet
    writes them with their types (integers, doubles, booleans, UTC
    timestamps), for DuckDB, pandas or Spark. openai writes what the OpenAI
    Batch API's output file holds (one line per succeeded row: id,
    custom_id, response with status_code and a chat.completion body); with
    --errors-only, what its error file holds.

    \b
    Example:
      summarize results --batch nightly-2026-11-29 --status failed --format csv > failed.csv
      summarize results --batch from-openai --format openai > output.jsonl
      summarize results --batch from-openai --format openai --errors-only > errors.jsonl
      summarize results --batch nightly-2026-11-29 --format parquet --output night.parquet
      summarize results --batch nightly-2026-11-29 --format parquet --output s3://team/night.parquet
    """
    from readers import export
    from readers import parquet as columnar

    if status is not None and errors_only:
        raise click.UsageError("--status and --errors-only both given: use one of them.")
    settings, db = database_of(ctx) if batch is not None else listed(ctx)
    if db is None:  # nothing submitted yet: nothing to export
        return
    if batch is not None:
        known(db, batch)
    if errors_only:
        status = (Status.FAILED, *export.ENDED)  # and the rows a batch ended: cancelled, expired
    elif fmt == "openai" and status is None:
        status = Status.SUCCEEDED
    folder = None if output is None or is_url(output) else Path(output).resolve().parent
    if folder is not None and not folder.is_dir():
        raise click.BadParameter(f"{folder} is not a folder: make it first", param_hint="--output")
    if fmt == "parquet" and output is None and sys.stdout.isatty():
        raise click.UsageError("Parquet is binary: give --output FILE or redirect to a file.")
    rows = export.rows(db, batch, status)
    options = settings.storage_options
    if fmt == "parquet":
        with export.destination(output, binary=True, storage_options=options) as out:
            columnar.write(rows, out)
        return
    with export.destination(output, binary=False, storage_options=options) as out:
        export.write(rows, out, fmt, export.structured(db))


@click.command("batches")
@click.option(
    "--latest", default=20, show_default=True, type=LATEST, help="How many batches to list."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print each batch as `status --json` does: request counts, settings, metadata.",
)
@click.pass_context
def batches_command(ctx, latest: int, as_json: bool) -> None:
    """List recent batches with their documents per status and their --meta.

    \b
    Example:
      summarize batches --latest 5
      summarize batches --json | jq '.[] | {batch, request_counts, settings}'
    """
    from core import presence
    from readers import status

    settings, db = listed(ctx)
    found = status.batch_status(db, status.latest_batches(db, latest)) if db else []
    if as_json:
        click.echo(status.as_json(found, presence.live_workers_now(settings)))
        return
    say(status.table(found, status.BATCHES_TABLE))


@click.command()
@click.argument("batch")
@click.pass_context
def retry(ctx, batch: str) -> None:
    """Queue a batch's failed documents again, with their attempts reset.

    Files that failed at submit (unreadable, not UTF-8, too large) have no text
    to retry: fix them and submit again.

    \b
    Example:
      summarize retry nightly-2026-11-29
    """
    from core import broker
    from jobs import batches

    settings, db = database_of(ctx)
    known(db, batch)
    with broker.session(settings):  # starts the embedded Redis when it is the broker
        done = batches.retry_failed(db, settings, batch)
    message = (
        f"Queued {counted(done.rows, 'failed row')} of {batch} again "
        f"({counted(done.documents, 'document')})."
    )
    if done.unreadable:
        files = "it" if done.unreadable == 1 else "them"
        message += (
            f" {done.unreadable:,} failed at submit and "
            f"{'has' if done.unreadable == 1 else 'have'} no text: fix the "
            f"{'file' if done.unreadable == 1 else 'files'} and submit {files} again."
        )
    say(message)


@click.command()
@click.argument("batch")
@click.pass_context
def cancel(ctx, batch: str) -> None:
    """Stop a batch's queued documents from running; they are marked cancelled.

    Documents a worker is already summarizing finish. `summarize retry` does not
    bring cancelled documents back; submit them again under a new batch name.

    \b
    Example:
      summarize cancel nightly-2026-11-29
    """
    from jobs import batches

    settings, db = database_of(ctx)
    known(db, batch)
    count = batches.cancel(db, batch, keep_texts=settings.keep_texts)
    say(f"Cancelled {counted(count, 'queued document')} of {batch}.")


@click.command()
@click.option(
    "--before",
    type=click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"]),
    metavar="DATE",
    help="Rows finished before this UTC day (YYYY-MM-DD) or time.",
)
@click.option(
    "--batch", metavar="NAME", help="Rows of this batch (with --before: only its old ones)."
)
@click.pass_context
def purge(ctx, before, batch: str | None) -> None:
    """Delete finished rows, the batches they leave empty, and texts no row uses.

    Queued and running rows are never touched: purge is safe beside running
    workers. It deletes a few thousand rows a transaction, and its rollups stay
    in step, so `status`, `batches` and the dashboards never see half of it.

    \b
    Example:
      summarize purge --before 2026-09-01
      summarize purge --batch nightly-2026-11-29
    """
    from datetime import timezone

    from core import retention

    if before is None and batch is None:
        raise click.UsageError("Say what to purge: --before DATE, --batch NAME, or both.")
    _, db = database_of(ctx)
    if batch is not None:
        known(db, batch)
    before = before.replace(tzinfo=timezone.utc) if before else None
    done = retention.purge(
        db,
        before=before,
        batch=batch,
        on_step=lambda p: say(f"  {counted(p.rows, 'row')} deleted", err=True),
    )
    left = f"; {counted(len(done.batches), 'batch', 'batches')} left empty and deleted"
    say(
        f"Purged {counted(done.rows, 'row')} and {counted(done.documents, 'document')}"
        f"{left if done.batches else ''}."
    )
    if batch is not None and batch not in done.batches:
        say(f"Batch {batch} still has queued or running rows: they were kept.")


@click.command()
@click.argument("batch", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--latest", default=5, show_default=True, type=LATEST, help="How many recent batches to show."
)
@click.pass_context
def status(ctx, batch: str | None, as_json: bool, latest: int) -> None:
    """Show documents per status, tokens spent and speed, for one batch or the latest ones.

    Tokens and speed count only what the batch generated itself; deduplicated
    documents are counted in the totals of rows but cost nothing. `looped`
    counts summaries that still repeat themselves after a second try, `cut`
    those that stopped at the length cap: read them with `summarize results`.

    \b
    Example:
      summarize status nightly-2026-11-29 --json
    """
    from core import presence
    from core.requeue import queued_by_model
    from readers import status as statuses

    settings, db = listed(ctx)
    names = [batch] if batch else statuses.latest_batches(db, latest) if db else []
    found = statuses.batch_status(db, names) if db else []
    if batch and not found:
        raise SummarizeError(f"No batch named {batch!r}: `summarize status` lists the latest ones.")
    workers = presence.live_workers_now(settings)
    if as_json:
        click.echo(statuses.as_json(found, workers))
        return
    say(statuses.table(found, statuses.STATUS_TABLE))
    if workers is not None and db is not None:
        for line in statuses.unserved(queued_by_model(db), workers):
            say(line)


@click.command("requeue")
@click.argument("batch", required=False)
@click.option(
    "--older-than",
    "older_than_s",
    default=60.0,
    show_default=True,
    type=Seconds(366 * DAY_S),
    metavar="SECONDS",
    help="Only rows submitted at least this long ago.",
)
@click.pass_context
def requeue_command(ctx, batch: str | None, older_than_s: float) -> None:
    """Queue again the documents the database says are pending but Redis has no message for.

    That happens when Redis lost its data (restarted without persistence, flushed).
    Workers and `submit --wait` do this on their own every half minute; this does
    it now. Documents that still have a message are left alone.

    \b
    Example:
      summarize requeue nightly-2026-11-29
    """
    from core import broker
    from core.requeue import requeue_stranded

    settings, db = database_of(ctx)
    if batch is not None:
        known(db, batch)
    with broker.session(settings) as client:
        done = requeue_stranded(db, client, settings, older_than_s=older_than_s, batch=batch)
    documents = "document" if done.documents == 1 else "documents"
    rows = "row" if done.rows == 1 else "rows"
    say(
        f"Queued {done.documents} {documents} again ({done.rows} {rows}) that had no "
        "message in Redis."
    )


COMMANDS = (status, results, batches_command, retry, cancel, purge, requeue_command)
