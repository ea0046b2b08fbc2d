"""The state table (``nefos.model.state_machine``) is the only place allowed transitions are
written: every task_state a module of ``src/`` writes or compares against, when it names one, is one
the table allows — a write with a compare-and-swap is a transition of an operation or a step, a
write without one a task_state some operation sets or some step leaves, a compare-and-swap a
task_state some operation is allowed from or some step expects. docs/architecture.md's state
diagrams are the table's, rendered."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nefos
from nefos.model import migration_state, states
from nefos.model import state_machine

SRC = Path(nefos.__file__).parent
DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
_UNRESOLVED = object()
NO_WRITE = object()  # a compare-and-swap that writes no task_state
_TASK_STATES = {v for k, v in vars(states).items() if k.isupper() and isinstance(v, str)} - {
    states.MIGRATION_KEY, *states._STATUS_BY_STATE}


def _constant(node: ast.AST):
    """The value ``node`` names: a literal, or a constant of the states modules; else _UNRESOLVED."""
    if isinstance(node, ast.Constant):
        return node.value
    name = (node.attr if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id in ("states", "migration_state") else node.id if isinstance(node, ast.Name) else None)
    for module in (states, migration_state):
        if name is not None and name.isupper() and hasattr(module, name):
            return getattr(module, name)
    return _UNRESOLVED


def _task_states(node: ast.AST):
    """The task_states a compare-and-swap's ``expected_task_state`` names, or _UNRESOLVED."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple"):
        node = node.args[0] if len(node.args) == 1 else node
    if isinstance(node, (ast.List, ast.Tuple)):
        values = [_constant(e) for e in node.elts]
        return _UNRESOLVED if _UNRESOLVED in values else values
    value = _constant(node)
    return list(value) if isinstance(value, tuple) else [value] if value is not _UNRESOLVED else _UNRESOLVED


def _dict_value(node: ast.Dict, key: str):
    for k, v in zip(node.keys, node.values):
        if isinstance(k, ast.Constant) and k.value == key:
            return v
    return None


def writes(tree: ast.AST) -> list[tuple[int, object, object]]:
    """(line, task_state written or NO_WRITE, task_states expected or None) of each write or
    compare-and-swap in ``tree`` that names its states."""
    found, seen = [], set()
    for node in ast.walk(tree):
        pairs = []  # (the node writing a task_state, the node naming the expected ones)
        if isinstance(node, ast.Call):
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            dicts = [a for a in node.args if isinstance(a, ast.Dict)]
            written = next((v for d in dicts if (v := _dict_value(d, "task_state")) is not None),
                           keywords.get("task_state"))
            if written is not None or "expected_task_state" in keywords:
                pairs.append((written, keywords.get("expected_task_state")))
                seen |= {id(d) for d in dicts}
        elif isinstance(node, ast.Dict) and isinstance(updates := _dict_value(node, "updates"), ast.Dict):
            # a build's progress saves: {"updates": {...}, "expected_task_state": [...]}
            pairs.append((_dict_value(updates, "task_state"), _dict_value(node, "expected_task_state")))
            seen.add(id(updates))
        for written, expected in pairs:
            value = _constant(written) if written is not None else NO_WRITE
            before = _task_states(expected) if expected is not None else None
            if value is not _UNRESOLVED or before not in (None, _UNRESOLVED):
                found.append((node.lineno, value, None if before is _UNRESOLVED else before))
    for node in ast.walk(tree):  # a task_state written into a dict saved later
        if isinstance(node, ast.Dict) and id(node) not in seen and (v := _dict_value(node, "task_state")) is not None:
            if (value := _constant(v)) is not _UNRESOLVED:
                found.append((node.lineno, value, None))
    return found


def disallowed(source: str) -> list[str]:
    """What ``source`` writes or expects that the state table does not allow, one line each."""
    transitions, written, expected = state_machine.transitions(), state_machine.written(), state_machine.expected()
    wrong = []
    for line, value, before in writes(ast.parse(source)):
        if value not in (None, NO_WRITE, _UNRESOLVED) and value not in _TASK_STATES:
            wrong.append(f"line {line}: {value!r} is no task_state")
        elif before is None:
            if value not in written and value not in (NO_WRITE, _UNRESOLVED):
                wrong.append(f"line {line}: writes {value!r}, which no operation sets and no step leaves")
        elif value in (NO_WRITE, _UNRESOLVED):
            if (extra := [b for b in before if b not in expected]):
                wrong.append(f"line {line}: expects {extra}, which no operation or step starts from")
        elif (missing := [b for b in before if (b, value) not in transitions]):
            wrong.append(f"line {line}: {missing} → {value!r} is no transition of the table")
    return wrong


def test_every_module_writes_only_the_transitions_the_table_allows():
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name in ("state_machine.py", "states.py"):
            continue
        wrong += [f"{path.relative_to(SRC)} {w}" for w in disallowed(path.read_text())]
    assert not wrong, "\n".join(wrong)


def test_a_write_the_table_does_not_allow_is_found():
    bad = '''
async def finish(conductor, uuid):
    await conductor.instance_save(None, uuid, {"task_state": states.RESIZE_FINISH},
                                  expected_task_state=[states.RESIZE_PREP])
    await conductor.instance_save(None, uuid, {"task_state": "resize_done"})
    await conductor.instance_save(None, uuid, {"task_state": states.SHELVING_OFFLOADING},
                                  expected_task_state=[states.POWERING_OFF])
    await conductor.instance_save(None, uuid, {"task_state": states.IMAGE_UPLOADING})
'''
    assert [w.split(":")[0] for w in disallowed(bad)] == ["line 3", "line 5", "line 6"]


def test_the_table_allows_what_the_good_steps_do():
    good = '''
async def step(conductor, uuid):
    await conductor.instance_save(None, uuid, {"task_state": states.RESIZE_MIGRATING},
                                  expected_task_state=[states.RESIZE_PREP])
    await conductor.instance_save(None, uuid, {"vm_state": states.ERROR, "task_state": None},
                                  expected_task_state=states.BUILD_TASK_STATES)
'''
    assert disallowed(good) == []


def test_every_operation_and_step_names_task_states_only():
    for name, op in state_machine.OPERATIONS.items():
        assert op.sets in _TASK_STATES | {state_machine.UNCHANGED}, name
        assert set(op.task_states or ()) <= _TASK_STATES | {None}, name
    for name, step in state_machine.STEPS.items():
        assert step.leaves in _TASK_STATES | {None, state_machine.UNCHANGED}, name
        assert set(step.expects or ()) <= _TASK_STATES | {None}, name


def _doc_diagrams() -> list[str]:
    return re.findall(r"```mermaid\n(stateDiagram-v2\n.*?)```", DOC.read_text(), re.S)


def test_the_architecture_docs_state_diagrams_are_the_tables():
    assert _doc_diagrams() == [state_machine.vm_state_diagram(), state_machine.task_state_diagram()]


_BY_STEP = ("step_save", "expects", "leaves")
_BY_OPERATION = ("operation", "check", "check_vm_state", "refusal", "allowed_from")


def test_every_step_and_operation_a_module_names_is_in_the_table():
    unknown = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute):  # state_machine.check(...)
                func = node.func.attr if getattr(node.func.value, "id", None) == "state_machine" else None
            else:  # expects(...), imported from the table's module
                func = node.func.id if getattr(node.func, "id", None) in _BY_STEP else None
            named = [(k.value, "step" if k.arg == "step" else "operation") for k in node.keywords
                     if k.arg in ("step", "operation")]
            if func in _BY_STEP + _BY_OPERATION and node.args:
                named.append((node.args[0], "step" if func in _BY_STEP else "operation"))
            for value, kind in named:
                table = state_machine.STEPS if kind == "step" else state_machine.OPERATIONS
                if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value not in table:
                    unknown.append(f"{path.relative_to(SRC)}:{node.lineno} {value.value}")
    assert not unknown, unknown
