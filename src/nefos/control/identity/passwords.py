"""Password hashing with scrypt, run off the event loop.

Hashes are ``scrypt$<log2 N>$<r>$<p>$<salt>$<key>`` (base64), so the cost can
be raised later without invalidating stored hashes. The KDF runs in worker
threads of its own (hashlib releases the GIL while it works): fewer of them
than there are CPUs (at most ``_CONCURRENCY``), each at a lower scheduling
priority, so a burst of (failed) logins neither blocks the loop nor starves it
of CPU, and cannot exhaust memory (each hash takes 128 * r * N bytes).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import concurrent.futures
import os
import threading
import weakref

_R, _P, _DKLEN = 8, 1, 32
_CONCURRENCY = 4
_semaphores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> Semaphore
_dummy_hashes: dict[int, str] = {}


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _scrypt(password: str, salt: bytes, log2n: int, r: int, p: int, dklen: int) -> bytes:
    n = 1 << log2n
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=dklen,
                          maxmem=128 * r * n * p + (1 << 20) * 4)


def hash_password_sync(password: str, rounds: int) -> str:
    if not 10 <= rounds <= 20:
        raise ValueError("password_hash_rounds must be between 10 and 20")
    salt = os.urandom(16)
    key = _scrypt(password, salt, rounds, _R, _P, _DKLEN)
    return f"scrypt${rounds}${_R}${_P}${_b64(salt)}${_b64(key)}"


def verify_password_sync(password: str, stored: str | None) -> bool:
    if not stored:
        return False
    try:
        algo, log2n, r, p, salt, key = stored.split("$")
        if algo != "scrypt":
            return False
        expected = base64.b64decode(key)
        got = _scrypt(password, base64.b64decode(salt), int(log2n), int(r), int(p), len(expected))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


_NICE = 10  # the KDF threads' niceness: the event loop thread wins the CPU when both want it
_executor: concurrent.futures.ThreadPoolExecutor | None = None


def _workers() -> int:
    return max(1, min(_CONCURRENCY, (os.cpu_count() or 2) - 1))


def _lower_priority() -> None:
    try:  # Linux: a thread id with PRIO_PROCESS renices that thread only
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _NICE)
    except (AttributeError, OSError):
        pass


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=_workers(), thread_name_prefix="nefos-kdf", initializer=_lower_priority)
    return _executor


async def _in_pool(fn, *args):
    return await asyncio.get_running_loop().run_in_executor(_pool(), fn, *args)


def _semaphore() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    sem = _semaphores.get(loop)
    if sem is None:
        sem = _semaphores[loop] = asyncio.Semaphore(_workers())
    return sem


async def hash_password(password: str, rounds: int) -> str:
    async with _semaphore():
        return await _in_pool(hash_password_sync, password, rounds)


async def verify_password(password: str, stored: str | None, rounds: int) -> bool:
    """Check ``password``; with no stored hash, still spend one KDF so timing reveals nothing."""
    if not isinstance(password, str):
        return False
    async with _semaphore():
        if not stored:
            dummy = _dummy_hashes.get(rounds)
            if dummy is None:
                dummy = _dummy_hashes[rounds] = await _in_pool(hash_password_sync, os.urandom(8).hex(), rounds)
            await _in_pool(verify_password_sync, password, dummy)
            return False
        return await _in_pool(verify_password_sync, password, stored)
