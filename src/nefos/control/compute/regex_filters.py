"""The server list's regular-expression filters (name, ip, ip6 and the columns Nova matches with
the database's REGEXP), bounded so that a hostile pattern cannot stall the service.

Patterns are matched with the ``regex`` module (the syntax of Python's ``re``), in a worker
thread (``concurrent=True`` releases the GIL while matching) and under one time budget per
request: a catastrophic pattern such as ``(a|a)+$`` against long names answers 400 instead of
holding the event loop while it backtracks.
"""

from __future__ import annotations

import asyncio
import time

import regex

from nefos import exceptions

MATCH_BUDGET = 1.0  # seconds of matching one list request may spend


def _compile(text, key: str) -> regex.Pattern:
    try:
        return regex.compile(str(text), regex.VERSION0)
    except (regex.error, OverflowError, RecursionError):
        raise exceptions.ValidationError(f"Invalid regular expression for {key}: {text}")


def _ip_addresses(instance: dict):
    for vif in instance.get("network_info") or []:
        for subnet in (vif.get("network") or {}).get("subnets") or []:
            for ip in subnet.get("ips") or []:
                address = ip.get("address") or ""
                yield ip.get("version") or (6 if ":" in address else 4), address


def _filter(instances: list[dict], name, ips: dict, columns: dict, budget: float) -> list[dict]:
    deadline = time.monotonic() + budget
    name_pattern = _compile(name, "name") if name else None
    ip_patterns = {v: _compile(r, "ip") for v, r in ips.items() if r}
    column_patterns = {k: _compile(r, k) for k, r in columns.items()}

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        return remaining

    def keep(instance: dict) -> bool:
        if name_pattern is not None and not name_pattern.search(
                instance.get("display_name") or "", timeout=left(), concurrent=True):
            return False
        if ip_patterns and not any(
                version in ip_patterns and ip_patterns[version].match(address, timeout=left(), concurrent=True)
                for version, address in _ip_addresses(instance)):
            return False  # Nova's ip/ip6: matched at the start of any fixed IP of that version
        for key, pattern in column_patterns.items():
            value = instance.get(key)
            if value is None or not pattern.search(str(value), timeout=left(), concurrent=True):
                return False
        return True

    try:
        return [i for i in instances if keep(i)]
    except TimeoutError:
        raise exceptions.ValidationError(
            "The regular expression filter is too expensive to evaluate; simplify it.") from None


async def apply(instances: list[dict], *, name=None, ips: dict | None = None,
                columns: dict | None = None) -> list[dict]:
    """The instances whose display name, fixed IPs and ``columns`` match the given patterns."""
    ips, columns = ips or {}, columns or {}
    if not (name or any(ips.values()) or columns):
        return instances
    return await asyncio.to_thread(_filter, instances, name, ips, columns, MATCH_BUDGET)
