"""`summarize submit`: queue the documents under some paths, and wait for them if asked.

The options are checked into an order by summarize/order.py, the files read and queued by
jobs/submit.py; its report and, with --wait, the batch's progress are printed here.
"""

from __future__ import annotations

import signal
import sys

import click

from core import errors, notices
from core.errors import SummarizeError
from core.settings import Settings
from readers.terminal import printable, say
from summarize.options import DAY_S, Seconds
from summarize.order import Order, order_of, submit_options


@click.command()
@submit_options
@click.option("--wait", is_flag=True, help="Wait until every document is summarized or failed.")
@click.option(
    "--timeout",
    type=Seconds(31 * DAY_S),
    metavar="SECONDS",
    help="With --wait: give up waiting after this long (exit status 4).",
)
@click.pass_context
def submit(ctx, paths: tuple[str, ...], wait: bool, timeout, **options) -> None:
    """Queue the documents under PATHS for summarizing.

    Folders are walked recursively for .txt, .md, .html, .pdf and .docx files
    (each a document) and .jsonl, .csv and .parquet files (each record a document; an
    OpenAI Batch input file is recognised by its custom_id lines). A PATH may be
    a URL: s3://, gs://, az://, hf://, https:// (the storage's extra installed,
    credentials as its library reads them, SUMMARIZE_STORAGE_OPTIONS). A document
    summarized before with the same model and prompt is answered from that
    summary instead of being queued again. With --wait, the exit status tells
    cron how it went: 0 every document succeeded, 3 some failed, 4 the timeout
    passed, 5 Redis, the database or the storage was unreachable.

    \b
    Example:
      summarize submit corpus/ --batch nightly-2026-11-29 --wait
      summarize submit s3://team-corpus/news/2026-11-29/ --batch news-2026-11-29
      summarize submit tickets.csv --text-field body --id-field ticket
      summarize submit exports/ --text-field tickets.csv=body --text-field text
      summarize submit requests.jsonl --batch from-openai      # OpenAI Batch input
      summarize submit papers/ --prompt "List the key points as bullets." \\
          --max-tokens 200 --meta team=research --meta source=arxiv
      summarize submit papers/ --prompt-file prompts/abstract.txt --max-sentences 2
      summarize submit papers/ --schema samples/schemas/paper.json --max-tokens 256
      summarize submit contracts/ --model Qwen/Qwen2.5-1.5B-Instruct   # its workers only
      summarize submit tickets.jsonl --expire-after 24h   # like the hosted batch APIs
    """
    from core import broker, database

    _stop_cleanly_on_sigterm()
    if timeout is not None and not wait:
        raise click.UsageError("--timeout is how long --wait waits: give --wait too.")
    order = order_of(ctx, paths, **options)
    db = database.ready(order.settings)
    with broker.session(order.settings) as client:
        report = queue_documents(order, db, client)
        if wait:
            final = _wait(order.settings, db, client, order.batch, timeout, report.documents)
            print_progress(final)
            ctx.exit(exit_status(final))


def queue_documents(order: Order, db, client, on_document=lambda: None):
    """Read and queue the order's documents under a progress bar, then print the report;
    refused when no path given could be used. `on_document` runs after each document."""
    from jobs import submit as submitting

    total = submitting.count_documents(
        order.paths, order.follow_links, order.settings.storage_options
    )
    with click.progressbar(
        length=total,
        label=f"Submitting {order.batch}",
        file=sys.stderr,
        show_pos=True,
        show_eta=False,
        update_min_steps=max(1, total // 1000),  # a million records draw a thousand times
    ) as bar:

        def read_one() -> None:
            bar.update(1)
            on_document()

        report = submitting.submit(
            order.settings,
            db,
            client,
            order.paths,
            order.batch,
            read_one,
            order.follow_links,
            fields=order.fields,
            meta=order.meta,
            schema=order.schema,
            expire_after_s=order.expire_after_s,
        )
        _finish(bar, report.documents)
    _print_report(report, order.settings)
    if order.notify:  # every document is queued: from now on its end is told
        notices.watch(db, order.batch, order.notify)
    if report.nothing_usable:
        raise SummarizeError(
            f"No path given could be used ({_shown(report.examples[0])}): check the "
            "paths; nothing was queued."
        )
    return report


def exit_status(final) -> int:
    """`--wait`'s exit status for a batch's final progress: 0, 3 (some failed), 4 (not done)."""
    if not final.done:
        return errors.EXIT_DEADLINE
    if not final.all_succeeded:
        return errors.EXIT_DOCUMENTS_FAILED
    return errors.EXIT_OK


def _stop_cleanly_on_sigterm() -> None:
    """SIGTERM (a cron job's timeout, systemd) ends submit as Ctrl-C does: what it started
    (the embedded Redis, extraction processes) is stopped on the way out."""

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _finish(bar, documents: int) -> None:
    """End the bar at the documents read: the count before reading was an estimate."""
    bar.length, bar.update_min_steps = max(documents, 1), 1
    bar.update(0)
    bar.render_progress()


def _wait(settings: Settings, db, client, name: str, timeout, expected: int):
    """Wait for the batch with a progress bar, putting back documents whose message was lost."""
    from core.requeue import REQUEUE_EVERY_S, sweep
    from readers import progress

    def requeue():
        try:
            sweep(db, client, settings, batch=name, older_than_s=REQUEUE_EVERY_S)
        except Exception as exc:  # noqa: BLE001 - Redis may be restarting: next time
            say(f"Could not look for stranded documents: {exc}", err=True)

    _say_if_unserved(settings, client, "waiting for one")
    with click.progressbar(
        length=max(expected, 1), label=f"Summarizing {name}", file=sys.stderr, show_pos=True
    ) as bar:

        def show(now):
            bar.length = max(now.total, 1)
            bar.update(now.finished - bar.pos)

        final = progress.wait(db, name, deadline_s=timeout, on_progress=show, requeue=requeue)
    if not final.done:
        _say_if_unserved(settings, client, "none came before the timeout")
    return final


def _say_if_unserved(settings: Settings, client, then: str) -> None:
    """Say so when no live worker serves the batch's model: the first thing a new user
    forgets is to start one."""
    from core import presence
    from readers.status import serving

    try:
        live = presence.live_workers(client, settings.queue)
    except Exception:  # noqa: BLE001 - Redis is restarting: the wait goes on regardless
        return
    model = settings.model_name
    if not serving(live).get(model):
        start = (
            f"SUMMARIZE_MODEL={model} summarize worker" if settings.model else "summarize worker"
        )
        say(f"No live worker serves model {model!r}: start one with `{start}`; {then}.", err=True)


def _print_report(report, settings: Settings) -> None:
    from core import database

    lines = [
        f"Batch {report.batch}",
        f"  documents found      {report.documents:>8,}",
        f"  queued               {report.submitted:>8,}",
        f"  deduplicated         {report.deduplicated:>8,}  (summarized or queued before, same model and prompt)",
        f"  already in batch     {report.already_in_batch:>8,}",
        f"  read now, not before {report.replaced:>8,}  (their earlier failed rows replaced)",
        f"  skipped              {report.skipped:>8,}  (not a kind summarize reads)",
        f"  failed to read       {report.unreadable:>8,}",
    ]
    if report.problems:
        lines.append(f"  paths not usable     {report.problems:>8,}")
    for example in report.examples:
        lines.append(f"    {_shown(example)}")
    hidden = report.unreadable + report.problems - len(report.examples)
    if hidden > 0:
        lines.append(f"    … and {hidden:,} more: see `summarize status {report.batch}`")
    lines.append(f"Results go to the `results` table of {database.describe(settings)}.")
    say("\n".join(lines))


def _shown(example: tuple[str, str]) -> str:
    path, problem = example
    return printable(f"{path!r}: {problem}")


def print_progress(progress) -> None:
    """A batch's final counts, one line: `N of M finished: …` (submit --wait, run)."""
    parts = ", ".join(f"{count:,} {status}" for status, count in sorted(progress.by_status.items()))
    say(f"{progress.finished:,} of {progress.total:,} finished: {parts or 'no documents'}")
