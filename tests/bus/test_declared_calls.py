"""Every method a client names is declared: a call to an undeclared method is refused at run time
(by the sender's client or the server's dispatch), so a client method added without its line in
``nefos.bus.interfaces`` would break that operation everywhere. This reads every
``call``/``cast``/``fanout`` in ``src/`` that names its method as a string literal."""

from __future__ import annotations

import re
from pathlib import Path

import nefos
from nefos.bus import interfaces

SRC = Path(nefos.__file__).parent
_NAMED_CALL = re.compile(r"\b_?(?:call|cast|fanout)\(\s*[A-Za-z_][\w.()]*\s*,\s*\"([a-z][a-z0-9_]*)\"")


def _named_calls() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in SRC.rglob("*.py"):
        for match in _NAMED_CALL.finditer(path.read_text()):
            found.setdefault(match.group(1), []).append(str(path.relative_to(SRC)))
    return found


def test_every_named_call_is_declared_by_an_interface():
    declared = {method for interface in interfaces.ALL for method in interface.methods}
    found = _named_calls()
    assert len(found) > 50  # the scan sees the clients (not an empty walk that proves nothing)
    undeclared = {method: sorted(set(where)) for method, where in found.items() if method not in declared}
    assert undeclared == {}
