"""Nova's extra-spec comparison language, used to match a flavor's extra spec against a value.

A requirement starting with an operator compares: ``=`` (at least, numerically), ``==``, ``!=``,
``>=``, ``<=`` (numeric), ``s==``, ``s!=``, ``s<``, ``s<=``, ``s>``, ``s>=`` (strings),
``<in>`` (substring), ``<all-in>`` (every word a substring), ``<or> a <or> b`` (one of); any
other requirement must equal the value. A number that does not parse matches nothing (Nova's
filter would fail the host on the exception).
"""

from __future__ import annotations

import operator
from typing import Callable


def _numeric(compare: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    def check(value: str, wanted: str) -> bool:
        try:
            return compare(float(value), float(wanted))
        except ValueError:
            return False
    return check


_OPERATORS: dict[str, Callable] = {
    "=": _numeric(operator.ge),
    "==": _numeric(operator.eq),
    "!=": _numeric(operator.ne),
    ">=": _numeric(operator.ge),
    "<=": _numeric(operator.le),
    "s==": operator.eq,
    "s!=": operator.ne,
    "s<": operator.lt,
    "s<=": operator.le,
    "s>": operator.gt,
    "s>=": operator.ge,
    "<in>": lambda value, wanted: wanted in value,
}


def match(value: str | None, requirement: str) -> bool:
    words = requirement.split()
    op = words[0] if words else None
    if op != "<or>" and op != "<all-in>" and op not in _OPERATORS:
        return value == requirement
    if value is None:
        return False
    operands = words[1:]
    if op == "<or>":
        # "<or> v1 <or> v2": every other word is a choice.
        return value in operands[::2]
    if not operands:
        return False
    if op == "<all-in>":
        return all(word in value for word in operands)
    return _OPERATORS[op](value, operands[0])
