"""Console auth tokens (Nova's ConsoleAuthToken): a grant to one instance's console.

A token is random (a UUID4, as Nova's) and handed out once, in the console's URL; the database
keeps only its SHA-256, with what it grants (the console's host and port, the instance) and when
it expires (``token_ttl`` seconds later, Nova's [consoleauth] token_ttl). The proxy looks a token
up by its hash; an unknown or expired one is ``InvalidToken``.
"""

from __future__ import annotations

import hashlib
import time
import uuid as uuidlib
from urllib.parse import urlencode

from sqlalchemy import delete, select

from nefos import exceptions
from nefos.db.models import ConsoleAuthToken


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def access_url(access_url_base: str, console_type: str, token: str) -> str:
    """The URL a user opens (Nova's ConsoleAuthToken.access_url): noVNC 1.1 and later take the
    token inside the ``path`` query parameter (the path of the websocket it opens)."""
    if console_type == "novnc":
        return f"{access_url_base}?{urlencode({'path': f'?token={token}'})}"
    return f"{access_url_base}?{urlencode({'token': token})}"


async def authorize(db, *, console_type: str, host: str, port: int, instance_uuid: str,
                    access_url_base: str | None, ttl: int, internal_access_path: str | None = None,
                    tls_port: int | None = None) -> str:
    """Store a new token for the console and return it (the only time it is seen in clear)."""
    token = str(uuidlib.uuid4())
    now = int(time.time())
    async with db.transaction() as s:
        # Expired grants are of no use to anyone: they go as new ones are made (Nova cleans them
        # up periodically on each compute host).
        await s.execute(delete(ConsoleAuthToken).where(ConsoleAuthToken.expires <= now))
        s.add(ConsoleAuthToken(token_hash=token_hash(token), console_type=console_type, host=host,
                               port=int(port), tls_port=None if tls_port is None else int(tls_port),
                               internal_access_path=internal_access_path,
                               instance_uuid=instance_uuid, expires=now + int(ttl),
                               access_url_base=access_url_base))
    return token


async def validate(db, token: str) -> dict:
    """What ``token`` grants; ``InvalidToken`` when it is unknown or has expired."""
    if not token:
        raise exceptions.InvalidToken(token="***")
    async with db.reader() as s:
        row = (await s.execute(select(ConsoleAuthToken).where(
            ConsoleAuthToken.token_hash == token_hash(token),
            ConsoleAuthToken.expires > int(time.time())))).scalar_one_or_none()
    if row is None:
        raise exceptions.InvalidToken(token="***")
    found = row.to_dict()
    del found["token_hash"]
    return found


async def delete_for_instance(db, instance_uuid: str) -> None:
    """Revoke every grant to the instance's consoles (it was deleted or moved)."""
    async with db.transaction() as s:
        await s.execute(delete(ConsoleAuthToken).where(ConsoleAuthToken.instance_uuid == instance_uuid))
