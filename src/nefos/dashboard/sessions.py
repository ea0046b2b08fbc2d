"""Signed-in users: a session is a random id in an HttpOnly, SameSite=Strict cookie, mapped in this
process's memory to the user's Keystone token and catalog. Nothing of the token reaches the browser;
the session ends when the token expires, at sign-out, or when the process restarts.

Each session has a CSRF token that every form posts back (SameSite=Strict already keeps other sites'
forms from carrying the cookie; the token also covers older browsers).
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass, field

COOKIE = "nefos_session"
_MAX_SESSIONS = 10000


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

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles

    def checks(self, csrf: str | None) -> bool:
        return csrf is not None and hmac.compare_digest(csrf, self.csrf)


class SessionStore:
    def __init__(self):
        self._sessions: dict[str, Session] = {}

    def add(self, session: Session) -> str:
        if len(self._sessions) >= _MAX_SESSIONS:
            self._drop_expired()
            if len(self._sessions) >= _MAX_SESSIONS:  # still full: the oldest go first
                for key in list(self._sessions)[:_MAX_SESSIONS // 10]:
                    del self._sessions[key]
        key = secrets.token_urlsafe(32)
        self._sessions[key] = session
        return key

    def get(self, key: str | None) -> Session | None:
        session = self._sessions.get(key or "")
        if session is None:
            return None
        if session.expires <= time.time():
            del self._sessions[key]
            return None
        return session

    def remove(self, key: str | None) -> None:
        self._sessions.pop(key or "", None)

    def _drop_expired(self) -> None:
        now = time.time()
        for key in [k for k, s in self._sessions.items() if s.expires <= now]:
            del self._sessions[key]
