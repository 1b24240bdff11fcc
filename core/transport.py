"""What the producer and the worker agree on with Celery and kombu's Redis transport: JSON
only, late acknowledgement, no results, and the key names of the messages workers hold
(from the transport's options, never literals elsewhere)."""

from __future__ import annotations

import ssl
from urllib.parse import parse_qs, urlsplit

from core import broker
from core.messages import home
from core.settings import Settings

PUBLISH_RETRIES = 3  # send_task's retries while Redis does not answer (about 1.5 s)
UNACKED = "unacked"  # kombu's hash of messages workers hold: tag -> [message, exchange, queue]
UNACKED_INDEX = "unacked_index"  # kombu's sorted set of those tags, by when they were taken
RESTORE_EVERY_S = 5  # how often workers look for messages of dead workers


def transport_options(settings: Settings) -> dict:
    return {
        "visibility_timeout": settings.visibility_timeout_s,
        "unacked_key": UNACKED,
        "unacked_index_key": UNACKED_INDEX,
        # Look for messages of dead workers often, so redelivery takes about one timeout.
        "unacked_restore_interval": RESTORE_EVERY_S,
        "unacked_restore_throttle": 1,
        "socket_timeout": 30,
        "socket_connect_timeout": 10,
        "health_check_interval": 10,
        "queue_order_strategy": "priority",  # the most urgent first (messages.lists_of)
    }


def celery_config(settings: Settings) -> dict:
    """What the producer and the worker agree on: JSON only, late acknowledgement, no results.
    A TLS broker's certificate is verified unless its URL says otherwise (kombu alone would
    connect to `rediss://` without checking it)."""
    config = _celery_config(settings)
    if broker.certificate_checks(settings) == "required":  # the URL's other ssl_* options kept
        asked = parse_qs(urlsplit(settings.broker_url).query)
        options = {k: v[-1] for k, v in asked.items() if k.startswith("ssl_")}
        config["broker_use_ssl"] = options | {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    return config


def _celery_config(settings: Settings) -> dict:
    return {
        "broker_url": broker.celery_url(settings),
        "broker_transport_options": transport_options(settings),
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "event_serializer": "json",
        "result_accept_content": ["json"],
        "task_ignore_result": True,
        "result_backend": None,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": False,
        "task_default_queue": home(settings),
        "task_publish_retry_policy": {
            "max_retries": PUBLISH_RETRIES,
            "interval_start": 0,
            "interval_step": 0.5,
            "interval_max": 0.5,
        },
    }
