"""Every HTTP client the code, the tests and the benchmarks open shares the process's TLS context.

httpx builds a TLS context for each client opened with its defaults, reading the whole CA bundle:
about 27 ms of CPU each time. A test that polls with ``httpx.get`` or opens a client per request
spends most of its CPU there (a burst of 1000 failed logins did 27 s of it), so every client passes
``verify=nefos.http_client.verified_tls()`` (or brings its own transport).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPENERS = {"Client", "AsyncClient", "get", "post", "put", "patch", "delete", "head", "request", "stream"}


def _clients_with_default_tls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in OPENERS
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "httpx"
                and not {kw.arg for kw in node.keywords} & {"verify", "transport"}):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_http_client_builds_its_own_tls_context():
    files = [p for tree in ("src", "tests", "bench") for p in sorted((ROOT / tree).rglob("*.py"))]
    offenders = [where for path in files for where in _clients_with_default_tls(path)]
    assert not offenders, "pass verify=verified_tls() (nefos.http_client):\n" + "\n".join(offenders)
