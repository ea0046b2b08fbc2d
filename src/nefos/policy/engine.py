"""The rule engine: oslo.policy's check language parsed and evaluated, and the rules in force
(the defaults with an operator's policy file over them, re-read when it changes).

Checks: ``@`` (always), ``!`` (never), ``rule:<name>``, ``role:<name>``, and
``<credential>:<value>`` (``project_id:%(project_id)s``, ``user_id:%(user_id)s``,
``is_admin:True``, ...), combined with ``and``, ``or``, ``not`` and parentheses.
An empty rule always passes. ``%(key)s`` is taken from the target.

Overrides: the YAML (or JSON) mapping of rule name to check string in the
file the ``policy_file`` option names (default ``<state_dir>/policy.yaml``
when that file exists). It is re-read when it changes; rules it does not
name keep their defaults.
"""

from __future__ import annotations

import ast
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from nefos import exceptions
from nefos.policy.defaults import DEFAULT_RULES

LOG = logging.getLogger(__name__)


class PolicySyntaxError(ValueError):
    pass


Check = Callable[[dict, dict, "Rules"], bool]  # (target, creds, rules) -> bool

def _tokens(text: str) -> list[str]:
    """oslo.policy's tokenizer: whitespace-separated, with leading '(' and trailing ')' split off
    (so ``%(project_id)s`` stays whole)."""
    out: list[str] = []
    for tok in text.split():
        clean = tok.lstrip("(")
        out.extend("(" * (len(tok) - len(clean)))
        if not clean:
            continue
        core = clean.rstrip(")")
        if core:
            out.append(core)
        out.extend(")" * (len(clean) - len(core)))
    return out


def _lookup(mapping: dict, dotted: str) -> Any:
    """``mapping[dotted]`` or the nested ``mapping[a][b]`` for ``a.b``; KeyError if absent."""
    if dotted in mapping:
        return mapping[dotted]
    value: Any = mapping
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def _substitute(template: str, target: dict) -> str | None:
    """``%(key)s`` from the target; None when a key is missing or empty (never matches)."""
    def repl(m: re.Match) -> str:
        value = _lookup(target, m.group(1))
        if value is None or value == "":
            raise KeyError(m.group(1))
        return str(value)
    try:
        return re.sub(r"%\(([^)]+)\)s", repl, template)
    except KeyError:
        return None


def _simple(token: str) -> Check:
    if token == "@":
        return lambda target, creds, rules: True
    if token == "!":
        return lambda target, creds, rules: False
    kind, sep, match = token.partition(":")
    if not sep:
        raise PolicySyntaxError(f"not a check: {token!r}")
    if kind == "rule":
        return lambda target, creds, rules: rules.check(match, target, creds)
    if kind == "role":
        def role_check(target, creds, rules):
            wanted = _substitute(match, target)
            return wanted is not None and wanted.lower() in creds.get("roles", ())
        return role_check
    if kind in ("http", "https"):
        raise PolicySyntaxError(f"HTTP checks are not supported: {token!r}")
    try:  # a literal on the right: compare values (is_admin:True, 'x':%(y)s is not supported)
        literal = ast.literal_eval(match)
        literal_ok = isinstance(literal, (bool, int, float, str)) and "%(" not in match
    except (ValueError, SyntaxError):
        literal, literal_ok = None, False

    def generic(target, creds, rules):
        try:
            have = _lookup(creds, kind)
        except KeyError:
            return False
        if have is None or have == "":
            return False
        if literal_ok:
            return have == literal if not isinstance(have, list) else literal in have
        wanted = _substitute(match, target)
        if wanted is None:
            return False
        if isinstance(have, (list, tuple, set)):
            return wanted in {str(v) for v in have}
        return str(have) == wanted
    return generic


class _Parser:
    """Recursive descent over: expr := term ('or' term)*; term := factor ('and' factor)*;
    factor := 'not' factor | '(' expr ')' | check."""

    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0

    def parse(self) -> Check:
        if not self.toks:
            return lambda target, creds, rules: True
        check = self.expr()
        if self.i != len(self.toks):
            raise PolicySyntaxError(f"unexpected {self.toks[self.i]!r}")
        return check

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> str:
        if self.i >= len(self.toks):
            raise PolicySyntaxError("unexpected end of rule")
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def expr(self) -> Check:
        parts = [self.term()]
        while (self.peek() or "").lower() == "or":
            self.take()
            parts.append(self.term())
        if len(parts) == 1:
            return parts[0]
        return lambda t, c, r: any(p(t, c, r) for p in parts)

    def term(self) -> Check:
        parts = [self.factor()]
        while (self.peek() or "").lower() == "and":
            self.take()
            parts.append(self.factor())
        if len(parts) == 1:
            return parts[0]
        return lambda t, c, r: all(p(t, c, r) for p in parts)

    def factor(self) -> Check:
        tok = self.take()
        if tok.lower() == "not":
            inner = self.factor()
            return lambda t, c, r: not inner(t, c, r)
        if tok == "(":
            inner = self.expr()
            if self.take() != ")":
                raise PolicySyntaxError("missing )")
            return inner
        if tok == ")" or tok.lower() in ("and", "or"):
            raise PolicySyntaxError(f"unexpected {tok!r}")
        return _simple(tok)


def parse(text: str) -> Check:
    """Compile one check string; raises PolicySyntaxError."""
    if not isinstance(text, str):
        raise PolicySyntaxError(f"a rule must be a string, not {type(text).__name__}")
    return _Parser(text).parse()


# Rule sets -----------------------------------------------------------------------------------------

@dataclass
class Rules:
    texts: dict[str, str]
    compiled: dict[str, Check]

    @classmethod
    def build(cls, overrides: dict[str, str] | None = None) -> "Rules":
        texts = {**DEFAULT_RULES, **(overrides or {})}
        return cls(texts, {name: parse(text) for name, text in texts.items()})

    def check(self, name: str, target: dict, creds: dict) -> bool:
        check = self.compiled.get(name)
        if check is None:
            return False  # an unknown rule referenced by another never passes
        try:
            return check(target, creds, self)
        except RecursionError:  # rules that refer to each other in a loop never pass
            LOG.error("policy rule %s refers to itself through other rules", name)
            return False


DEFAULTS = Rules.build()  # the rules in force without a policy file


class Enforcer:
    """The rules in force for one ``policy_file`` (defaults when there is none); re-read on change."""

    CHECK_INTERVAL = 1.0  # seconds between looks at the file

    def __init__(self, path: Path | None):
        self.path = path
        self._stamp: tuple[float, int] | None = None
        self._rules = DEFAULTS
        self._lock = threading.Lock()
        self._next_check = 0.0
        self._error: str | None = None

    def rules(self) -> Rules:
        """The rules in force; ServiceUnavailable (503) while the file is unreadable or wrong:
        a broken policy fails closed rather than falling back to other rules."""
        if self.path is None:
            return DEFAULTS
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + self.CHECK_INTERVAL
            try:
                st = self.path.stat()
                stamp = (st.st_mtime, st.st_size)
            except FileNotFoundError:
                stamp = None
            if stamp != self._stamp:
                with self._lock:
                    if stamp != self._stamp:
                        try:
                            self._rules = load_file(self.path) if stamp else DEFAULTS
                            self._error = None
                            if stamp:
                                LOG.info("policy overrides loaded from %s", self.path)
                        except exceptions.ServiceUnavailable as exc:
                            self._error = str(exc)
                            LOG.error("%s", exc)
                        self._stamp = stamp
        if self._error is not None:
            raise exceptions.ServiceUnavailable(self._error)
        return self._rules


def load_file(path: Path) -> Rules:
    """The defaults overridden by ``path`` (YAML or JSON: rule name -> check string)."""
    import yaml
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise exceptions.ServiceUnavailable(f"Cannot read the policy file {path}: {exc}")
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise exceptions.ServiceUnavailable(f"The policy file {path} must map rule names to rules.")
    try:
        return Rules.build({k: ("" if v is None else v) for k, v in data.items()})
    except PolicySyntaxError as exc:
        raise exceptions.ServiceUnavailable(f"The policy file {path} has a bad rule: {exc}")


_enforcers: dict[tuple[str, str], Enforcer] = {}


def policy_path(cfg) -> Path | None:
    configured = getattr(cfg, "policy_file", "") or ""
    if configured:
        path = Path(configured)
        if not path.is_absolute():
            candidate = Path(cfg.state_dir) / path
            path = candidate if candidate.exists() or not path.exists() else path
        return path
    default = Path(cfg.state_dir) / "policy.yaml"
    return default


def enforcer_for(cfg) -> Enforcer:
    key = (str(getattr(cfg, "policy_file", "") or ""), str(cfg.state_dir))
    enforcer = _enforcers.get(key)
    if enforcer is None:
        enforcer = _enforcers[key] = Enforcer(policy_path(cfg))
        if key[0]:
            enforcer.rules()  # a named file that is broken fails at start, not on the first request
    return enforcer
