"""A burst of parallel password guesses evaluates at most ``lockout_failure_attempts`` of them.

Each failure is counted atomically before the password hash is computed, so guesses that arrive
together cannot all be checked against a count none of them has raised yet. The burst is sent
through several identity processes sharing one PostgreSQL or MariaDB database (where the race can
happen across processes), and every guess is held at the password check until the whole burst has
either reached it or been answered: the worst case, every guess in before any is evaluated.
The hash computations are counted in every process.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import time

import pytest
from identity_helpers import make_config, password_auth

from tests.backends import fresh_database

PROCESSES = 4
LIMIT = 10
BURST = 25
SERVER_BACKENDS = [pytest.param("postgresql", marks=pytest.mark.postgres),
                   pytest.param("mysql", marks=pytest.mark.mysql)]


def _identity_process(state_dir, overrides, user, guesses, ready, go, gate, arrived, answered, kdf_runs,
                      kdf_matches, results) -> None:
    """One identity service process: the Identity API over ASGI, its password checks counted and
    held at ``gate``; sends ``guesses`` at once when ``go`` is set and puts the answers on ``results``."""
    import httpx

    from nefos.control.identity import passwords
    from nefos.control.identity.rest import create_app
    from nefos.service import Runtime

    checked = passwords.verify_password
    computed = passwords.verify_password_sync

    async def held_check(password, stored, rounds):
        with arrived.get_lock():
            arrived.value += 1
        await asyncio.to_thread(gate.wait)
        return await checked(password, stored, rounds)

    def counted_hash(password, stored):
        match = computed(password, stored)
        with kdf_runs.get_lock():
            kdf_runs.value += 1
        if match:
            with kdf_matches.get_lock():
                kdf_matches.value += 1
        return match

    passwords.verify_password = held_check
    passwords.verify_password_sync = counted_hash

    async def main() -> None:
        rt = await Runtime.open(make_config(state_dir, **overrides))
        try:
            transport = httpx.ASGITransport(app=create_app(rt))
            async with httpx.AsyncClient(transport=transport, base_url="http://identity.test") as api:
                ready.set()
                await asyncio.to_thread(go.wait)

                async def guess(password: str):
                    r = await api.post("/v3/auth/tokens", json=password_auth(user, password))
                    with answered.get_lock():
                        answered.value += 1
                    return password, r.status_code, r.json().get("error", {}).get("message", "")

                for answer in await asyncio.gather(*[guess(p) for p in guesses]):
                    results.put(answer)
        finally:
            await rt.close()

    asyncio.run(main())


def _wait_for(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _burst(tmp_path, guesses: list[str], overrides: dict) -> dict:
    """``guesses`` for ``demo`` sent at once through PROCESSES identity processes; the answers and
    the number of hash computations."""
    mp = multiprocessing.get_context("spawn")
    ready = [mp.Event() for _ in range(PROCESSES)]
    go, gate = mp.Event(), mp.Event()
    arrived, answered, kdf_runs, kdf_matches = (mp.Value("i", 0) for _ in range(4))
    results = mp.Queue()
    shares = [guesses[i::PROCESSES] for i in range(PROCESSES)]
    procs = [mp.Process(target=_identity_process, daemon=True, args=(
        tmp_path / f"identity-{i}", overrides, "demo", shares[i], ready[i], go, gate, arrived, answered,
        kdf_runs, kdf_matches, results)) for i in range(PROCESSES)]
    for p in procs:
        p.start()
    try:
        for i, event in enumerate(ready):
            _wait_for(lambda: event.is_set() or not procs[i].is_alive(), "the identity processes to start")
            assert procs[i].is_alive(), f"identity process {i} ended at start"
        go.set()
        # Every guess is either held at the password check or already answered (refused unchecked).
        _wait_for(lambda: arrived.value + answered.value >= len(guesses), "every guess to arrive")
        gate.set()
        answers = []
        for _ in guesses:
            try:
                answers.append(results.get(timeout=120))
            except queue.Empty:
                pytest.fail(f"{len(answers)} of {len(guesses)} answers")
        for p in procs:
            p.join(timeout=60)
    finally:
        gate.set()
        go.set()
        for p in procs:
            if p.is_alive():
                p.kill()
    return {"answers": answers, "kdf_runs": kdf_runs.value, "kdf_matches": kdf_matches.value}


async def _bootstrapped(tmp_path, overrides: dict) -> dict:
    from nefos.control.identity.bootstrap import bootstrap
    from nefos.service import Runtime
    rt = await Runtime.open(make_config(tmp_path / "bootstrap", **overrides), migrate=True)
    try:
        return await bootstrap(rt)
    finally:
        await rt.close()


def _sign_in_after(tmp_path, overrides: dict, password: str):
    """One more attempt for demo after the burst, and how many hashes it cost."""
    import httpx

    from nefos.control.identity import passwords
    from nefos.control.identity.rest import create_app
    from nefos.service import Runtime

    async def attempt():
        runs = 0
        computed = passwords.verify_password_sync

        def counted(password, stored):
            nonlocal runs
            runs += 1
            return computed(password, stored)
        rt = await Runtime.open(make_config(tmp_path / "after", **overrides))
        try:
            passwords.verify_password_sync = counted
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(rt)),
                                         base_url="http://identity.test") as api:
                r = await api.post("/v3/auth/tokens", json=password_auth("demo", password))
        finally:
            passwords.verify_password_sync = computed
            await rt.close()
        return r, runs
    return asyncio.run(attempt())


@pytest.fixture(params=SERVER_BACKENDS)
def server_database(request):
    with fresh_database(request.param) as db_url:
        yield db_url


@pytest.mark.parametrize("right_passwords", [0, 1])
def test_a_burst_of_parallel_guesses_evaluates_at_most_the_lockout_limit(tmp_path, server_database,
                                                                         right_passwords):
    """25 guesses at once (all wrong, or 24 wrong and the right one last) through four processes,
    for a user locked after 10 failures: at most 10 are evaluated, the others are refused as
    locked without a hash; the right one gets in only if it was one of the 10 evaluated, and
    unless it did, the right password is refused as locked after the burst, without a hash."""
    _check_burst(tmp_path, {"database_url": server_database, "lockout_failure_attempts": LIMIT,
                            "lockout_duration": 600}, LIMIT, right_passwords)


def test_with_the_shipped_defaults_a_burst_evaluates_at_most_six_guesses(tmp_path, server_database):
    """The same burst (24 wrong and the right one) with the shipped lockout options."""
    from nefos.config import Config
    shipped = Config().lockout_failure_attempts
    assert shipped == 6
    _check_burst(tmp_path, {"database_url": server_database}, shipped, 1)


def _check_burst(tmp_path, overrides: dict, limit: int, right_passwords: int) -> None:
    creds = asyncio.run(_bootstrapped(tmp_path, overrides))
    right = creds["demo"]["password"]
    guesses = [f"wrong-{i}" for i in range(BURST - right_passwords)] + [right] * right_passwords
    burst = _burst(tmp_path, guesses, overrides)

    assert burst["kdf_runs"] <= limit, f"{burst['kdf_runs']} of {BURST} guesses were evaluated"
    by_password = {password: (status, message) for password, status, message in burst["answers"]}
    refused = [m for p, (s, m) in by_password.items() if s == 401 and "locked" in m]
    assert len(refused) == BURST - burst["kdf_runs"]
    assert all(s == 401 for p, (s, _m) in by_password.items() if p != right)
    got_in = right_passwords and by_password[right][0] == 201
    if right_passwords:
        assert got_in == (burst["kdf_matches"] == 1), by_password[right]
        assert got_in or "locked" in by_password[right][1], by_password[right]

    r, runs = _sign_in_after(tmp_path, overrides, right)
    if got_in and r.status_code == 201:
        return  # the right one cleared the count: it was the last guess counted
    assert r.status_code == 401 and "locked" in r.json()["error"]["message"], r.text
    assert runs == 0
