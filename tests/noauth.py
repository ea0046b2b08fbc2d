"""Identity headers for tests of a cloud running with ``auth_strategy = noauth``.

noauth trusts these headers as given and makes nobody admin unless X-Roles says so; a request
without X-Project-Id is refused. ``ADMIN`` is the context the suites' default clients send.
"""

from nefos.context import DEFAULT_PROJECT_ID, DEFAULT_USER_ID

ADMIN = {"X-Project-Id": DEFAULT_PROJECT_ID, "X-User-Id": DEFAULT_USER_ID, "X-Roles": "admin,member,reader"}
