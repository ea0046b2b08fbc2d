"""The services' packages import each other in one direction only: no two packages (a compute
host's ``compute.host`` and the network's ``network.agents`` counted as packages of their own)
import each other, lazily or not — except through a service's client (its ``rpcapi`` module: the
declared, versioned interface every caller uses). The direction follows the calls: the API side
knows the conductor's client, the conductor the scheduler's and the compute hosts' clients, a host
only the conductor's client."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import nefos

SRC = Path(nefos.__file__).parent
_OWN_PACKAGES = {("compute", "host"): "compute.host", ("network", "agents"): "network.agents"}


def _package(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "nefos" or len(parts) < 2:
        return None
    return _OWN_PACKAGES.get(tuple(parts[1:3]), parts[1])


def _exists(module: str) -> bool:
    path = SRC.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").exists() or path.is_dir()


def _edges() -> dict[tuple[str, str], set[str]]:
    edges: dict[tuple[str, str], set[str]] = {}
    for path in SRC.rglob("*.py"):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
        source = _package(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            if any(name.split(".")[-1] == "rpcapi" for name in names[:1]):
                continue  # a service's client, not its inside
            for name in names:
                target = _package(name)
                if target and target != source and _exists(name):
                    edges.setdefault((source, target), set()).add(module)
    return edges


def test_no_two_packages_import_each_other():
    edges = _edges()
    assert ("conductor", "scheduler") in edges and ("api", "compute") in edges  # the walk sees imports
    packages = {package for pair in edges for package in pair}
    cycles = {f"{a} <-> {b}": (sorted(edges[a, b]), sorted(edges[b, a]))
              for a, b in itertools.combinations(sorted(packages), 2) if (a, b) in edges and (b, a) in edges
              and "rest" not in (a, b)}  # rest.py: the shared request plumbing every API uses, not a service
    assert cycles == {}
