"""Signed-in users: a session is a random id in an HttpOnly, SameSite=Strict cookie, mapped in this
process's memory to the user's Keystone token and catalog. Nothing of the token reaches the browser;
the session ends when the token expires, at sign-out, when the process restarts, or when the same
user has signed in ``dashboard_max_sessions_per_user`` times since (its oldest session goes first).
The store never ends one user's live session to make room for another's: full of live sessions, it
refuses a new user's sign-in.

Each session has a CSRF token that every form posts back (SameSite=Strict already keeps other sites'
forms from carrying the cookie; the token also covers older browsers). The sign-in form, before
there is a session, has one too: an HMAC, under a key of this process, of a random value in a
cookie of the browser's own (``SignInTokens``), so another site cannot sign a visitor in to its
own account (login CSRF).

A message a page shows after a redirect (an API's refusal of a form) waits in the session under a
random key, which is all the redirect's address carries: no page shows text from its address.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

COOKIE = "nefos_session"
SIGN_IN_COOKIE = "nefos_sign_in"
_MAX_MESSAGES = 8  # per session: each redirect's message is read once, by the page it lands on
_MAX_MESSAGE_LENGTH = 1000


class StoreFull(Exception):
    """Every place in the store is another user's live session."""


@dataclass
class Session:
    token: str
    expires: float
    user_name: str
    user_id: str
    project_name: str
    project_id: str
    roles: list[str]
    urls: dict[str, str]  # the catalog's public URLs by service type
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    messages: OrderedDict[str, str] = field(default_factory=OrderedDict)

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles

    def checks(self, csrf: str | None) -> bool:
        return csrf is not None and hmac.compare_digest(csrf, self.csrf)

    def keep_message(self, message: str) -> str:
        """The key under which the page a redirect leads to finds ``message`` (once)."""
        while len(self.messages) >= _MAX_MESSAGES:
            self.messages.popitem(last=False)
        key = secrets.token_urlsafe(8)
        self.messages[key] = message[:_MAX_MESSAGE_LENGTH]
        return key

    def take_message(self, key: str | None) -> str | None:
        return self.messages.pop(key or "", None)


class SignInTokens:
    """The sign-in form's CSRF token, bound to the browser's ``SIGN_IN_COOKIE`` (nothing is kept per
    visitor: a token is the cookie's HMAC under this process's key)."""

    def __init__(self):
        self._key = secrets.token_bytes(32)

    @staticmethod
    def new_cookie() -> str:
        return secrets.token_urlsafe(32)

    def token(self, cookie: str) -> str:
        return hmac.new(self._key, cookie.encode(), hashlib.sha256).hexdigest()

    def checks(self, cookie: str | None, token: str | None) -> bool:
        return bool(cookie) and token is not None and hmac.compare_digest(self.token(cookie), token)


class SessionStore:
    def __init__(self, max_sessions: int, max_per_user: int):
        self.max_sessions = max_sessions
        self.max_per_user = max_per_user
        self._sessions: dict[str, Session] = {}
        self._by_user: dict[str, list[str]] = {}  # each user's session keys, oldest first

    def add(self, session: Session) -> str:
        """The new session's key. Beyond ``max_per_user``, the user's oldest sessions end; a store
        full of others' live sessions raises ``StoreFull``."""
        mine = self._by_user.get(session.user_id, [])
        while len(mine) >= self.max_per_user:
            self.remove(mine[0])
        if len(self._sessions) >= self.max_sessions:
            self._drop_expired()
            if len(self._sessions) >= self.max_sessions:
                mine = self._by_user.get(session.user_id, [])
                if not mine:
                    raise StoreFull()
                self.remove(mine[0])  # the user's own oldest makes room, no one else's
        key = secrets.token_urlsafe(32)
        self._sessions[key] = session
        self._by_user.setdefault(session.user_id, []).append(key)
        return key

    def get(self, key: str | None) -> Session | None:
        session = self._sessions.get(key or "")
        if session is None:
            return None
        if session.expires <= time.time():
            self.remove(key)
            return None
        return session

    def remove(self, key: str | None) -> None:
        session = self._sessions.pop(key or "", None)
        if session is None:
            return
        keys = self._by_user[session.user_id]
        keys.remove(key)
        if not keys:
            del self._by_user[session.user_id]

    def __len__(self) -> int:
        return len(self._sessions)

    def _drop_expired(self) -> None:
        now = time.time()
        for key in [k for k, s in self._sessions.items() if s.expires <= now]:
            self.remove(key)
