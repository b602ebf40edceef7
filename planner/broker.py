"""What the broker still holds: which runs have a message waiting in a queue or being worked on
(unacknowledged), so beat re-sends only runs whose messages are really lost. Re-sending a run
that merely waits behind a backlog would put a second copy in that backlog, and the backlog
would multiply itself."""

from __future__ import annotations

import ast
import json
import logging

from celery import current_app

log = logging.getLogger(__name__)

RUN_TASKS = {"planner.tasks.start_run", "planner.tasks.size_batch", "planner.tasks.aggregate_run"}


def _run_id(message: dict) -> int | None:
    headers = message.get("headers") or {}
    if headers.get("task") not in RUN_TASKS:
        return None
    try:
        args = ast.literal_eval(headers.get("argsrepr") or "()")
    except (ValueError, SyntaxError):
        return None
    if isinstance(args, tuple | list) and args and isinstance(args[0], int):
        return args[0]
    return None


def _decode(raw: bytes) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    if isinstance(value, list) and value:  # unacked entries are [message, exchange, key]
        value = value[0]
    return value if isinstance(value, dict) else {}


def runs_with_messages(queues: list[str]) -> set[int] | None:
    """Run ids named by a message in ``queues`` (every priority) or unacknowledged anywhere;
    None when the broker cannot be inspected (not Redis), so callers keep their old rule.
    Raises the broker's connection errors when it is down."""
    with current_app.connection_for_read() as connection:
        if connection.transport.driver_type != "redis":
            return None
        channel = connection.default_channel
        client = channel.client
        raw = []
        for queue in queues:
            for priority in channel.priority_steps:
                raw += client.lrange(channel._q_for_pri(queue, priority), 0, -1)
        raw += client.hvals(channel.unacked_key)
    ids = {_run_id(_decode(item)) for item in raw}
    ids.discard(None)
    return ids
