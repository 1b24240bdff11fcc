"""The `summarize dashboard` command: serve the page with uvicorn on a socket bound here.

Binding the socket ourselves turns "port in use" into an error line that says
what to do, instead of uvicorn's log line and exit. Starlette and uvicorn are
imported only when the command runs, so `import summarize.cli` stays quick.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

import click

from core.errors import SummarizeError
from core.settings import Settings
from readers.terminal import say
from summarize.options import Whole

BACKLOG = 128


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port, or an error that says how to get one."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM
        )[0]
    except socket.gaierror as exc:
        raise SummarizeError(
            f"Cannot listen on {host!r} ({exc.strerror}): give --host an address of this "
            "machine, such as 127.0.0.1."
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SummarizeError(
                f"Port {port} on {host} is in use: stop what listens there, or choose "
                "another port with --port (--port 0 picks a free one)."
            ) from None
        raise SummarizeError(
            f"Cannot listen on {host}:{port} ({exc.strerror}): choose another --host or --port."
        ) from None
    sock.listen(BACKLOG)  # connections wait in the backlog until uvicorn serves them
    return sock


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback needs a dashboard key made first.",
)
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=Whole(0, 65535),
    help="Port to listen on (0: any free port).",
)
@click.pass_context
def dashboard(ctx, host: str, port: int) -> None:
    """Serve a web page of the latest batches: progress, throughput, tokens, failures.

    It reads the database the other commands use (SUMMARIZE_DATABASE_URL),
    read-only, through the batch_stats, daily_stats and failures views, and
    refreshes every few seconds while a batch runs. Click a batch to see its
    slowest documents with their summaries, and its failed ones with the error.

    It listens on 127.0.0.1 unless --host says otherwise. Once a key that opens it is
    made (summarize keys create NAME --dashboard), the page asks for one, the browser's
    password prompt taking the key as the password; anywhere but loopback it will not
    start without such a key. It shows every batch, whichever key made it.

    \b
    Example:
      summarize dashboard --port 8080
    """
    import uvicorn
    from sqlalchemy.exc import DBAPIError

    from api import keys
    from core import database
    from readers.dashboard.app import LOOPBACK_NAMES, create_app
    from readers.dashboard.queries import open_readonly

    settings = Settings.for_command(ctx)
    db = open_readonly(settings)
    try:
        keyed = keys.any_live(db, dashboard=True)
    except DBAPIError:  # a database from before dashboard keys (migration 0015)
        keyed = False
    local = is_loopback(host)
    if not local and not keyed:
        db.dispose()
        raise SummarizeError(
            f"Refusing to listen on {host} with no dashboard key: anyone who reaches it could "
            "read every summary. Make one first (summarize keys create NAME --dashboard)."
        )
    sock = bind(host, port)

    def opens(key: str) -> bool:
        return keys.owner(db, key, dashboard=True) is not None

    app = create_app(
        db, allowed_hosts=LOOPBACK_NAMES if local else ("*",), opens=opens if keyed else None
    )
    bound = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    say(f"Dashboard of {database.describe(settings)} on http://{shown}:{bound}/ (Ctrl-C stops it)")
    if keyed:
        say("It asks for a key made with --dashboard: give it as the password.")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        db.dispose()
