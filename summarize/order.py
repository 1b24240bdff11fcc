"""What `summarize submit` and `summarize run` are asked: their options, checked into an Order.

Each option is refused with its fix here, before a file is read or a model loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from core import errors
from core.settings import MAX_SUMMARY_TOKENS, PRIORITY_NAMES, Settings
from summarize.options import Whole

# What submit and run share: the paths' batch, how to read them, how to summarize them.
OPTIONS = (
    click.option(
        "--batch", "batch_name", metavar="NAME", help="Batch name (default: folder-date-time)."
    ),
    click.option(
        "--follow-links",
        is_flag=True,
        help="Follow symlinks that lead outside the folders given (by default they are refused).",
    ),
    click.option(
        "--text-field",
        multiple=True,
        metavar="[FILE=]NAME",
        help="In .jsonl, .csv and .parquet files: the field holding each record's text (default text); "
        "repeat to try several in order; FILE=NAME for the record files named FILE.",
    ),
    click.option(
        "--id-field",
        multiple=True,
        metavar="[FILE=]NAME",
        help="In .jsonl, .csv and .parquet files: the field holding each record's id (results.doc_id; "
        "default id), as --text-field.",
    ),
    click.option(
        "--model",
        metavar="NAME",
        help="This batch's model (default: SUMMARIZE_MODEL); only workers running it take it.",
    ),
    click.option(
        "--prompt", metavar="TEXT", help="This batch's instruction (default: SUMMARIZE_PROMPT)."
    ),
    click.option(
        "--prompt-file",
        type=click.Path(dir_okay=False, path_type=Path),
        metavar="FILE",
        help="This batch's instruction, from a UTF-8 text file.",
    ),
    click.option(
        "--max-tokens",
        type=Whole(1, MAX_SUMMARY_TOKENS),
        metavar="N",
        help="This batch's summary length in tokens (default: the profile's, or SUMMARIZE_MAX_TOKENS).",
    ),
    click.option(
        "--max-sentences",
        type=Whole(0, 1000),
        metavar="N",
        help="End each summary after N sentences; 0: no limit (default: 3 with the default "
        "instruction, none with your own).",
    ),
    click.option(
        "--schema",
        "schema_file",
        type=click.Path(dir_okay=False, path_type=Path),
        metavar="FILE.json",
        help="Summaries are JSON valid under this JSON schema (vLLM's structured outputs).",
    ),
    click.option(
        "--expire-after",
        metavar="DURATION",
        help="Documents still queued this long after the batch began end as expired (24h, 90m, 7d).",
    ),
    click.option(
        "--meta",
        multiple=True,
        metavar="KEY=VALUE",
        help="Attach KEY=VALUE to the batch (repeatable); `batches` and the dashboard show it.",
    ),
    click.option(
        "--priority",
        type=click.Choice(PRIORITY_NAMES),
        help="Workers take this batch's documents before those of less urgent batches, even "
        "ones queued long before (default: SUMMARIZE_PRIORITY, normal).",
    ),
    click.option(
        "--notify",
        metavar="URL",
        help="POST a signed event to URL once the batch has ended (default: SUMMARIZE_NOTIFY_URL).",
    ),
)


def submit_options(command):
    """Give `command` submit's options (its PATHS and the options OPTIONS holds)."""
    for option in reversed(OPTIONS):
        command = option(command)
    return click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))(command)


@dataclass(frozen=True)
class Order:
    """What to submit, checked: the paths, their batch, how to read and summarize them."""

    settings: Settings
    paths: tuple[str, ...]
    batch: str
    follow_links: bool
    fields: object  # jobs.fields.FieldChoice
    meta: dict[str, str]
    schema: dict | None
    expire_after_s: float | None
    notify: str | None  # where the batch's end is told (core/notices.py)


def order_of(
    ctx,
    paths: tuple[str, ...],
    batch_name: str | None,
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
    notify: str | None,
    priority: str | None,
) -> Order:
    """Submit's options checked, each refused with the fix, before anything is read."""
    from core.settings import read_prompt_file
    from jobs import batches, prompts
    from jobs.fields import FieldChoice

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
    if prompt_file is not None:
        prompt = read_prompt_file(prompt_file, "--prompt-file")
    settings = Settings.for_command(ctx).with_changes(
        model=model.strip() if model and model.strip() else None,
        instruction=prompt.strip() if prompt else None,
        max_tokens=max_tokens,
        max_sentences=max_sentences,
        priority=priority,
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
        fields = FieldChoice.parse(text_field, id_field)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    schema = prompts.read_schema(schema_file) if schema_file is not None else None
    try:
        expire_after_s = batches.duration_s(expire_after) if expire_after else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--expire-after") from None
    name = batch_name or batches.default_batch_name(paths)
    return Order(
        settings,
        paths,
        name,
        follow_links,
        fields,
        _pairs(meta),
        schema,
        expire_after_s,
        _notify(settings, notify),
    )


def _notify(settings: Settings, given: str | None) -> str | None:
    """--notify's URL, or SUMMARIZE_NOTIFY_URL's, checked; refused unless notices can be signed."""
    from core.settings import parse_notify_url

    url = settings.notify_url
    if given is not None:
        try:
            url = parse_notify_url(given)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--notify") from None
    if url and settings.notify_secret is None:
        raise errors.SettingsError(
            "Notices are signed, and SUMMARIZE_NOTIFY_SECRET is not set: set it here and where "
            "the workers run (`summarize keys secret` makes one; receivers verify with it)."
        )
    return url


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
