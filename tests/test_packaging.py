"""The wheel alone is a working cloud: built from this tree, installed with only its declared
runtime dependencies into a new virtualenv (pip's cache makes the install quick after the first
run), its ``nefos up --driver fake`` starts, answers a token and the flavor and server lists,
and stops cleanly. A module that the services import but pyproject.toml lists only in an extra
fails here at start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.isolation.helpers import login, start_nefos, stop_nefos

ROOT = Path(__file__).resolve().parents[1]


def _run(*argv, cwd: Path | None = None) -> None:
    # Without this tree on PYTHONPATH: pip would take its metadata for an installed nefos.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=540, env=env)
    assert done.returncode == 0, f"{' '.join(map(str, argv))}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def test_the_wheel_installed_alone_runs_nefos_up(tmp_path):
    src = tmp_path / "src-copy"  # built from a copy: the build leaves build/ and *.egg-info behind
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    pip = venv / "bin" / "pip"
    _run(pip, "wheel", "--no-deps", "--disable-pip-version-check", "-w", tmp_path / "dist", src)
    wheel = next((tmp_path / "dist").glob("nefos-*.whl"))
    # Not byte-compiled at install (every module of every dependency): the cloud compiles what it
    # imports, which is what the test is about.
    _run(pip, "install", "--disable-pip-version-check", "--no-compile", wheel)

    state = tmp_path / "state"
    state.mkdir()
    proc, clouds = start_nefos(state, bin_dir=venv / "bin")
    try:
        admin = clouds["nefos-admin"]["auth"]
        api = login(admin["auth_url"].rstrip("/"), admin["username"], admin["password"], admin["project_name"])
        flavors = api.get("compute", "/flavors")
        assert flavors.status_code == 200, flavors.text
        assert flavors.json()["flavors"], "the bootstrap flavors"
        servers = api.get("compute", "/servers")
        assert servers.status_code == 200 and servers.json() == {"servers": []}, servers.text
        # the process is the new virtualenv's, not this tree's
        assert (venv / "lib").exists()
        out = subprocess.run([str(venv / "bin" / "python"), "-c", "import nefos; print(nefos.__file__)"],
                             capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
        assert str(venv) in out.stdout, out
    finally:
        stop_nefos(proc, state)
