"""`summarize serve` (OpenAI's Files and Batch API) and `summarize keys` (who may call it).

Starlette and uvicorn are imported only when the server runs, so `import summarize.cli`
stays quick.
"""

from __future__ import annotations

import click

from core.errors import SummarizeError
from core.settings import Settings
from readers.terminal import printable, say
from summarize.dashboard import bind, is_loopback
from summarize.options import Whole


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback needs a key made first.",
)
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=Whole(0, 65535),
    help="Port to listen on (0: any free port).",
)
@click.pass_context
def serve(ctx, host: str, port: int) -> None:
    """Serve OpenAI's Files and Batch API: scripts written for OpenAI's run here unchanged.

    Point the official client at it (OpenAI(base_url="http://HOST:PORT/v1", api_key=KEY))
    and upload a batch input file, create a batch, poll it, and download its output file.
    Its batches are ordinary batches, summarized by `summarize worker`, shown by
    `summarize status` and the dashboards. Each key (summarize keys create NAME) sees only
    its own files and batches. On loopback with no key made, any key is the one local
    user; anywhere else the server will not start without a key.

    \b
    Example:
      summarize keys create alice
      summarize serve --port 8000 &
      summarize worker
    """
    import uvicorn

    from api import batches, keys
    from api.app import create_app
    from core import broker, database, notices
    from readers.dashboard.app import LOOPBACK_NAMES

    settings = Settings.for_command(ctx)
    db = database.ready(settings)
    local = is_loopback(host)
    keyed = keys.any_live(db)
    if not local and not keyed:
        raise SummarizeError(
            f"Refusing to listen on {host} with no API key: anyone who reaches it could read "
            "every summary. Make one first (summarize keys create NAME)."
        )
    sock = bind(host, port)
    with broker.session(settings) as client:
        resumed = batches.resume(settings, db, client)
        app = create_app(
            settings,
            db,
            client,
            open_to_any_key=not keyed,
            allowed_hosts=LOOPBACK_NAMES if local else ("*",),
        )
        bound = sock.getsockname()[1]
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        say(
            f"OpenAI Batch API of {database.describe(settings)} on http://{shown}:{bound}/v1 "
            "(Ctrl-C stops it)"
        )
        if not keyed:
            say("No API key made yet: any key is taken, as the one local user.")
        if resumed:
            say(f"Validating again {resumed} batch(es) a stopped server left validating.")
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        told = notices.Notices(db, settings.notify_secret).start()  # a failed batch's, too
        try:
            server.run(sockets=[sock])
        finally:
            told.stop()
            sock.close()
            db.dispose()


@click.group()
def keys() -> None:
    """Make, list and revoke the keys `summarize serve` accepts; make a notices' secret.

    \b
    Example:
      summarize keys create alice
    """


@keys.command("create")
@click.argument("name")
@click.option(
    "--dashboard",
    is_flag=True,
    help="The key opens `summarize dashboard` too, which shows every batch: for operators.",
)
@click.pass_context
def keys_create(ctx, name: str, dashboard: bool) -> None:
    """Make a key named NAME and print it, once: only its hash is kept.

    \b
    Example:
      summarize keys create alice
      summarize keys create ops --dashboard
    """
    from api import keys as api_keys
    from core import database

    db = database.ready(Settings.for_command(ctx))
    key = api_keys.create(db, name, dashboard=dashboard)
    click.echo(key)
    say(f"Key {name!r} made: it is printed above, once; store it now.", err=True)


@keys.command("list")
@click.pass_context
def keys_list(ctx) -> None:
    """List the keys by name, when each was made, whether it was revoked, and whether it
    opens the dashboard.

    \b
    Example:
      summarize keys list
    """
    from api import keys as api_keys
    from core import database

    found = api_keys.listed(database.ready(Settings.for_command(ctx)))
    if not found:
        say("No keys yet: summarize keys create NAME makes one.")
    for row in found:
        state = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "live"
        opens = "  opens the dashboard" if row.dashboard else ""
        click.echo(
            f"{printable(row.name):<32} made {row.created_at:%Y-%m-%d %H:%M}  {state}{opens}"
        )


@keys.command("revoke")
@click.argument("name")
@click.pass_context
def keys_revoke(ctx, name: str) -> None:
    """Revoke the key named NAME: it stops working at once; its files and batches stay.

    \b
    Example:
      summarize keys revoke alice
    """
    from api import keys as api_keys
    from core import database

    api_keys.revoke(database.ready(Settings.for_command(ctx)), name)
    say(f"Key {name!r} revoked.")


@keys.command("secret")
def keys_secret() -> None:
    """Print a new secret for signing notices, to set as SUMMARIZE_NOTIFY_SECRET.

    Set it where workers and `summarize serve` run, and give it to the receivers of
    `submit --notify`: they verify each notice's webhook-signature with it (Standard
    Webhooks, as OpenAI's webhooks; openai's `client.webhooks.unwrap` does).

    \b
    Example:
      summarize keys secret > notify-secret   # then SUMMARIZE_NOTIFY_SECRET=$(cat notify-secret)
    """
    import base64
    import secrets

    click.echo("whsec_" + base64.b64encode(secrets.token_bytes(32)).decode())
