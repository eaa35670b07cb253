"""Which ingestion items have a live message in the Redis broker: waiting in the queue, or delivered to a worker
and not acknowledged yet.

With `acks_late` on Redis, kombu keeps every delivered message in the `unacked` hash until the task ends; a
killed worker's messages stay there and are pushed back onto the queue once they are older than the visibility
timeout. So a message that exists at all is in the queue's lists or in that hash. Both are read in one MULTI/EXEC
transaction, so a message moved between them by a restore is seen in one of the two. Only a message a worker has
popped (BRPOP) and not yet recorded in the hash is in neither: that is how a SIGKILL loses one, and for an instant
how a live delivery looks too, which is why the sweep probes twice.

Key names follow kombu's Redis transport and the app's transport options (prefix, unacked key, priority steps).

Usage:
    live = live_item_ids(celery_app_for(settings))   # frozenset of item ids; None if it cannot be read whole
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import redis
from celery import Celery
from kombu.transport.redis import Channel as RedisChannel

from docqa.ingestion.celery_app import INGEST_TASK

logger = logging.getLogger(__name__)

# Bounds one probe's cost: past this many waiting or unacknowledged messages the answer is "unknown" (None).
MAX_SCANNED_MESSAGES = 20_000
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def live_item_ids(app: Celery, max_messages: int = MAX_SCANNED_MESSAGES) -> frozenset[int] | None:
    """Item ids of every ingest message in the app's default queue or unacknowledged; None when that is unknown.

    Unknown means a broker other than Redis, more than `max_messages` messages, or Redis not answering.
    """
    url = str(app.conf.broker_url or "")
    if not url.startswith(REDIS_SCHEMES):
        return None
    options = app.conf.broker_transport_options or {}
    prefix = options.get("global_keyprefix", "")
    sep = options.get("sep", RedisChannel.sep)
    queue = app.conf.task_default_queue
    # kombu's Channel._q_for_pri: the lowest priority step is the queue's own name.
    queue_keys = [prefix + (f"{queue}{sep}{step}" if step else queue)
                  for step in options.get("priority_steps", RedisChannel.priority_steps)]
    unacked_key = prefix + options.get("unacked_key", RedisChannel.unacked_key)
    client = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=10)
    try:
        if int(client.hlen(unacked_key)) > max_messages:
            return None
        with client.pipeline(transaction=True) as pipe:
            for key in queue_keys:
                pipe.llen(key)
                pipe.lrange(key, 0, max_messages - 1)
            pipe.hvals(unacked_key)
            replies = pipe.execute()
    except redis.RedisError as exc:
        logger.warning("cannot read the broker's messages: %s", exc)
        return None
    finally:
        client.close()
    lengths, waiting = replies[0:-1:2], replies[1:-1:2]
    if sum(int(n) for n in lengths) > max_messages:
        return None
    ids: set[int] = set()
    for raw in [*[m for key_messages in waiting for m in key_messages], *replies[-1]]:
        ids.update(ingest_item_ids(raw))
    return frozenset(ids)


def ingest_item_ids(raw: bytes | str) -> list[int]:
    """The item ids an ingest message carries (a queued message, or an unacked entry `[message, exchange, key]`)."""
    try:
        message: Any = json.loads(raw)
        if isinstance(message, list):
            message = message[0]
        if (message.get("headers") or {}).get("task") != INGEST_TASK:
            return []
        body = message["body"]
        if (message.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args, kwargs, _embed = json.loads(body)  # Celery's task message protocol 2
        item_ids = args[0] if args else kwargs["item_ids"]
        return [int(item_id) for item_id in item_ids]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        logger.warning("unreadable message in the ingestion queue: %s", exc)
        return []
