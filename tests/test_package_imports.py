"""The modules of ``src/`` import each other in one direction only. No files import each other in a
loop, directly or through others; and every import goes down the order of ``LAYERS``: a part of the
tree imports only the parts listed before it. Imports made inside functions count as any other
(the walk reads the whole syntax tree), so a loop cannot hide in a function.

A part is a folder of ``nefos`` and its side (docs/architecture.md, "Layout"): the plumbing every
side may use (the modules at the top), what both sides share without the database (``model``; the tiny guest's builder, ``guest``),
storage and messaging, the control plane's repositories (``objects``), each service's client
(``clients``; identity's face to the other services, ``clients.identity``, is lower: the request
plumbing every API uses validates tokens with it), the network agents, the control plane's
services (``control.<service>``, the Compute API's routes ``control.compute.rest``), a hypervisor
host (``host.virt``, ``host.compute``) and the commands. The direction follows the calls: the APIs
know the conductor's client, the conductor the scheduler's and the compute hosts' clients, a host
the conductor's client. And a hypervisor host's code and the agents' never import the database,
its repositories nor the control plane: what they read and write goes through a client."""

from __future__ import annotations

import ast
from pathlib import Path

import nefos

SRC = Path(nefos.__file__).parent

# Lowest first; a part may import the parts before it, never one after it.
LAYERS = [
    # Plumbing: knows no service.
    ("timeutils", "exceptions", "context", "component", "waiting", "fileperms", "openapi", "task_report",
     "logs", "admission", "metrics", "policy", "validation", "http_client"),
    # What the control plane, the hosts and the agents share without the database; the tiny guest's
    # builder (a command and a libvirt host's probe build it).
    ("model", "guest"),
    # Storage and messaging.
    ("db", "bus"),
    # The options (``[upgrade_levels]`` names the bus's topics), the control plane's repositories on
    # the database, the notifications they send.
    ("config", "objects", "notifications"),
    # Identity's face to the other services.
    ("clients.identity",),
    # What every service runs on, the HTTP server every listener runs, the request plumbing every
    # API uses.
    ("service", "http_server", "rest"),
    # The services' clients, and the contract between the network service and its agents.
    ("clients",),
    # The network agents (the network service's all-in-one external network uses their helpers).
    ("agents",),
    # The control plane's services. The conductor serves the compute API and the hosts and calls
    # the scheduler, all through clients.
    ("control", "control.identity", "control.image", "control.metadata", "control.network", "control.conductor",
     "control.compute", "control.scheduler", "control.console", "control.dashboard", "control.compute.rest"),
    # A hypervisor host: its hypervisor drivers, its compute manager.
    ("host", "host.virt", "host.compute"),
    # The commands: a deployment's health, its event log, everything in one process, the CLI.
    ("cmd",),
]
# What a hypervisor host's and the agents' code never imports.
HOST_SIDE = ("host", "agents")
NEVER_FROM_HOST_SIDE = ("nefos.db", "nefos.objects", "nefos.control")
ORDER = [part for layer in LAYERS for part in layer]
_OWN_PARTS = sorted((part for part in ORDER if "." in part), key=len, reverse=True)


def _module(path: Path) -> str:
    return ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")


MODULES = {_module(path): path for path in SRC.rglob("*.py")}


def _part(module: str) -> str:
    name = module.removeprefix("nefos.")
    own = next((part for part in _OWN_PARTS if name == part or name.startswith(part + ".")), None)
    return own or name.split(".")[0]


def _imported(node: ast.AST) -> list[str]:
    """The modules of this tree that ``node`` imports (``from a import b``: ``a.b`` when that is a
    module, else ``a``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module
                 for alias in node.names]
    else:
        return []
    return [name for name in names if name in MODULES]


def _imports() -> dict[str, dict[str, int]]:
    """module -> {module it imports: the line of the first such import}."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in MODULES.items():
        graph[module] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            for target in _imported(node):
                if target != module:
                    graph[module].setdefault(target, node.lineno)
    return graph


def _loops(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    loops.append(sorted(component))
    return loops


def test_the_walk_sees_imports_made_at_the_top_and_inside_functions():
    graph = _imports()
    assert "nefos.clients.scheduler" in graph["nefos.control.conductor.manager"]
    assert "nefos.bus.local" in graph["nefos.bus"]  # imported inside create_bus
    assert _loops({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_no_files_import_each_other_in_a_loop():
    graph = _imports()
    loops = {" -> ".join(loop): {f"{a} -> {b}": graph[a][b] for a in loop for b in loop if b in graph[a]}
             for loop in _loops(graph)}
    assert loops == {}


def test_every_part_of_the_tree_has_its_place_in_the_layers():
    assert len(ORDER) == len(set(ORDER))
    parts = {_part(module) for module in MODULES if module != "nefos"}
    assert parts - set(ORDER) == set()
    assert set(ORDER) - parts == set()


def test_every_import_goes_down_the_layers():
    rank = {part: position for position, part in enumerate(ORDER)}
    upward = {}
    for module, targets in _imports().items():
        for target, line in targets.items():
            source_part, target_part = _part(module), _part(target)
            if source_part != target_part and rank[target_part] > rank[source_part]:
                upward[f"{module}:{line}"] = f"{target} ({source_part} -> {target_part})"
    assert upward == {}


def test_host_and_agent_code_never_imports_the_database_or_the_control_plane():
    found = {f"{module}:{line}": target for module, targets in _imports().items()
             if module.removeprefix("nefos.").split(".")[0] in HOST_SIDE
             for target, line in targets.items()
             if any(target == banned or target.startswith(banned + ".") for banned in NEVER_FROM_HOST_SIDE)}
    assert found == {}
