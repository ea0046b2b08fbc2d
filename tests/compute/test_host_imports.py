"""A hypervisor host's code and the network agents' never load the database: every module of
``nefos.host`` and ``nefos.agents`` imports, in a fresh interpreter, without ``nefos.db``,
SQLAlchemy or the control plane's repositories (``nefos.objects``): what a host reads and writes
goes through the conductor, ``nefos.clients.conductor``. And the imports follow the calls: of the
control plane a host or an agent loads nothing but clients (``nefos.clients``)."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = r"""
import importlib, json, pkgutil, sys
import nefos.agents, nefos.host
imported = []
for package in (nefos.host, nefos.agents):
    imported.append(package.__name__)
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
        imported.append(module.name)
loaded = sorted(m for m in sys.modules if m.split(".")[:2] in (["nefos", "db"], ["nefos", "objects"])
                or m.split(".")[0] == "sqlalchemy")
control_plane = sorted(m for m in sys.modules if m.split(".")[:2] == ["nefos", "control"])
print(json.dumps({"imported": imported, "database_modules": loaded, "control_plane_modules": control_plane}))
"""


def test_host_and_agent_modules_import_no_database_nor_control_plane():
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # The walk found the host's and the agents' modules (not an empty package that proves nothing).
    assert {"nefos.host.compute.manager", "nefos.host.compute.service", "nefos.host.compute.resize",
            "nefos.host.virt.fake", "nefos.agents.l2_agent", "nefos.agents.fake_agent"} <= set(found["imported"])
    assert found["database_modules"] == []
    assert found["control_plane_modules"] == []
