"""The host side holds no database: importing every module of ``nefos.agents`` (in a fresh
interpreter) imports neither Nefos's database package nor SQLAlchemy. The agents' every question
goes to the network service over the bus (``nefos.clients.network_agents``); their running without a
database URL is ``test_vxlan.test_the_l2_agent_runs_without_a_database_and_without_vxlan_by_default``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, json, pkgutil, sys
import nefos.agents as agents
names = sorted(m.name for m in pkgutil.walk_packages(agents.__path__, agents.__name__ + "."))
names.append("nefos.clients.network_agents")  # their wire contract with the network service
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names,
                  "database": sorted(m for m in sys.modules
                                     if m == "sqlalchemy" or m.startswith(("sqlalchemy.", "nefos.db")))}))
"""


def test_no_agent_module_imports_the_database():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "PATH": "/usr/bin:/bin"})
    found = json.loads(out.stdout)
    assert {"nefos.agents.l2_agent", "nefos.agents.dhcp_agent", "nefos.agents.l3_agent",
            "nefos.agents.firewall", "nefos.agents.metadata_proxy",
            "nefos.clients.network_agents", "nefos.agents.vxlan"} <= set(found["modules"])
    assert found["database"] == []
