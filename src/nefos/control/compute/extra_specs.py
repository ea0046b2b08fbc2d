"""Flavor extra spec validation (Compute API 2.86): the extra specs Nova knows, checked by name and value.

``extra_spec_registry.json`` lists every extra spec Nova's validators know (upstream
``nova.api.validation.extra_specs``: the ``accel``, ``aggregate_instance_extra_specs``,
``capabilities``, ``hw``, ``hw_rng``, ``hw_video``, ``os``, ``pci_passthrough``, ``quota``,
``resources``, ``trait`` and ``vmware`` namespaces, and the few names without a namespace),
each as ``{"name", "value", "parameters"}``: a name with ``{parameter}`` placeholders and
each placeholder's pattern, and the value's type (``int``: ``min`` / ``max``; ``bool``:
boolean-like strings; ``str``: a ``pattern`` or an ``enum``).

As Nova's ``validators.validate``: a known name must have a valid value; an unknown name
in a recognised namespace is refused; anything else (``foo:bar``, no namespace) is
accepted unchecked. Every failure is a 400 ``ValidationError`` with Nova's wording.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from nefos import exceptions

_TRUE = ("1", "t", "true", "on", "y", "yes")
_FALSE = ("0", "f", "false", "off", "n", "no")


class _Spec:
    def __init__(self, entry: dict):
        self.name = entry["name"]
        self.value = entry["value"]
        regex = re.escape(self.name)
        for param in entry.get("parameters", []):
            regex = regex.replace(re.escape("{%s}" % param["name"]), f"(?P<{param['name']}>{param['pattern']})")
        self.name_regex = re.compile(regex)

    def check(self, value: str) -> None:
        kind = self.value["type"]
        if kind == "int":
            try:
                number = int(value)
            except ValueError:
                raise exceptions.ValidationError(f"Validation failed; '{value}' is not a valid integer value.")
            if "max" in self.value and self.value["max"] < number:
                raise exceptions.ValidationError(f"Validation failed; '{value}' is greater than the max value "
                                                 f"of '{self.value['max']}'.")
            if "min" in self.value and self.value["min"] > number:
                raise exceptions.ValidationError(f"Validation failed; '{value}' is less than the min value "
                                                 f"of '{self.value['min']}'.")
        elif kind == "bool":
            if value.strip().lower() not in _TRUE + _FALSE:
                raise exceptions.ValidationError(f"Validation failed; '{value}' is not a valid boolean-like value.")
        elif "pattern" in self.value:
            if not re.fullmatch(self.value["pattern"], value):
                raise exceptions.ValidationError(f"Validation failed; '{value}' is not of the format "
                                                 f"'{self.value['pattern']}'.")
        elif "enum" in self.value and value not in self.value["enum"]:
            values = ", ".join(str(v) for v in self.value["enum"])
            raise exceptions.ValidationError(f"Validation failed; '{value}' is not one of: {values}.")


@functools.cache
def _registry() -> tuple[dict[str, _Spec], list[_Spec], list[re.Pattern]]:
    """(specs by literal name, specs with parameters, the recognised namespaces' patterns)."""
    entries = json.loads((Path(__file__).with_name("extra_spec_registry.json")).read_text())
    literal: dict[str, _Spec] = {}
    parametrised: list[_Spec] = []
    namespaces: dict[str, re.Pattern] = {}
    for entry in entries:
        spec = _Spec(entry)
        if entry.get("parameters"):
            parametrised.append(spec)
        else:
            literal[spec.name] = spec
        if ":" in spec.name_regex.pattern:
            namespace = spec.name_regex.pattern.split(":", 1)[0]
            namespaces.setdefault(namespace, re.compile(namespace))
    return literal, parametrised, list(namespaces.values())


def validate(name: str, value) -> None:
    """400 when ``name`` is a known extra spec with an invalid ``value``, or an unknown name in a
    namespace Nova validates."""
    value = str(value)
    literal, parametrised, namespaces = _registry()
    spec = literal.get(name) or next((s for s in parametrised if s.name_regex.fullmatch(name)), None)
    if spec is None:
        spec = next((s for s in literal.values() if s.name_regex.fullmatch(name)), None)
    if spec is not None:
        spec.check(value)
        return
    if ":" not in name:
        return
    prefix = name.split(":", 1)[0]
    if any(ns.fullmatch(prefix) for ns in namespaces):
        raise exceptions.ValidationError(f"Validation failed; extra spec '{name}' does not appear to be a "
                                         "valid extra spec.")
