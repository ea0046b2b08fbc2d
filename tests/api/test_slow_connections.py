"""One client cannot starve an API listener of connections: a `nefos up` cloud, with the shipped
options and systemd's soft open-file limit (1024; the hard one as this machine allows), keeps
answering another client within a second while one address holds more connections than the process
may open files, idle or trickling a request head a byte at a time. The listener holds at most
``http_maxconn_per_source`` of them (the rest are answered 429 at once), its open files stay bounded,
and what it holds ends at the request-head deadline (``http_request_timeout``): 408 for a head begun,
a close for nothing sent. Many addresses together fill at most ``http_maxconn`` (the rest: 503 at
once, the other client too, until the deadline). Under a hard open-file limit of 1024 the listeners
share it: each is given less, one address a proportional share, and the bounds hold the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import resource
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from nefos.config import Config
from nefos.http_server import MAX_LINGERING
from nefos.http_client import verified_tls
from tests.deployment.test_up_command import _env, start_up

SHIPPED = Config()
ATTACKER = "127.0.0.2"  # the attacking client's address (every 127/8 address is the loopback's)
# systemd's default soft LimitNOFILE for a service; its hard one (524288) where this machine allows
SYSTEMD_NOFILE = f"1024:{min(524288, resource.getrlimit(resource.RLIMIT_NOFILE)[1])}"
CONNECTIONS = 1100  # more than the serving process may open under that soft limit
REFUSED = (b"HTTP/1.1 429 ", b"HTTP/1.1 503 ", b"(reset)")
HEAD_START = b"GET /v2.1/servers HTTP/1.1\r\nHost: 127.0.0.1\r\n"


class UpCloud:
    def __init__(self, proc: subprocess.Popen, log: Path, env: dict):
        self.proc, self.log, self.env = proc, log, env
        self.compute = f"http://127.0.0.1:{env['NEFOS_COMPUTE_API_PORT']}"
        self.compute_port = int(env["NEFOS_COMPUTE_API_PORT"])

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


@contextlib.contextmanager
def nefos_up(tmp_path, nofile: str):
    """`nefos up` with the shipped options (a fake compute host: no guests needed), under the
    open-file limits ``nofile`` (soft:hard)."""
    env = _env()
    proc, log = start_up(tmp_path, "--fake-hosts", "1", env=env, launcher=("prlimit", f"--nofile={nofile}"))
    try:
        yield UpCloud(proc, log, env)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    """Under systemd's soft open-file limit."""
    with nefos_up(tmp_path_factory.mktemp("slow-connections"), SYSTEMD_NOFILE) as up:
        yield up


@pytest.fixture(scope="module")
def hard_limited_cloud(tmp_path_factory):
    """Under a hard open-file limit of 1024."""
    with nefos_up(tmp_path_factory.mktemp("slow-connections-1024"), "1024:1024") as up:
        yield up
async def slowest_answer(url: str, requests: int = 5, status: int = 200) -> float:
    """The longest of ``requests`` answers (``status``) to GET ``url`` from another address, each on a
    new connection (seconds; a request unanswered within 5 s counts as 5 s and more)."""
    slowest = 0.0
    for _ in range(requests):
        started = time.perf_counter()
        try:
            async with httpx.AsyncClient(verify=verified_tls(), timeout=5) as client:
                assert (await client.get(url)).status_code == status
        except httpx.TimeoutException:
            return float("inf")
        slowest = max(slowest, time.perf_counter() - started)
    return slowest


class Attack:
    """Connections from each of ``sources`` (address: how many), each sending nothing (``trickle``
    False) or a request head's start and then a header byte a second, never its end."""

    def __init__(self, port: int, trickle: bool, sources: dict[str, int]):
        self.port, self.trickle, self.sources = port, trickle, sources
        self.connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.answers: list[asyncio.Task] = []
        self._trickling: asyncio.Task | None = None

    async def __aenter__(self) -> "Attack":
        # All at once, so that every connection is open well within the head deadline however busy
        # the machine: a held connection that reaches it frees its place.
        await asyncio.gather(*(self._open(source) for source, count in self.sources.items()
                               for _ in range(count)))
        if self.trickle:
            self._trickling = asyncio.create_task(self._trickle())
        return self

    async def _open(self, source: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, local_addr=(source, 0))
        if self.trickle:
            writer.write(HEAD_START)
        self.connections.append((reader, writer))
        self.answers.append(asyncio.create_task(self._answer(reader)))

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[bytes, float]:
        """What the server sent on the connection until it closed it, and when it closed it."""
        try:
            answer = await reader.read()
        except ConnectionError:
            answer = b"(reset)"
        return answer, time.monotonic()

    async def _trickle(self) -> None:
        while True:
            await asyncio.sleep(1)  # the attacker's pace, not a wait for an event
            for (_reader, writer), answered in zip(self.connections, self.answers):
                if not answered.done() and not writer.is_closing():
                    with contextlib.suppress(ConnectionError):
                        writer.write(b"X")

    def answered(self) -> int:
        return sum(task.done() for task in self.answers)

    async def __aexit__(self, *exc) -> None:
        if self._trickling is not None:
            self._trickling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._trickling
        for _reader, writer in self.connections:
            writer.close()
        for task in self.answers:
            task.cancel()
        await asyncio.gather(*self.answers, return_exceptions=True)


async def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def _attack_is_bounded(cloud: UpCloud, trickle: bool, sources: dict[str, int], held: int,
                             refusal: bytes, other_client_status: int = 200) -> None:
    """``sources`` open their connections; the listener holds ``held`` of them and refuses the others
    at once with ``refusal`` in the Compute API's body; another client is answered
    ``other_client_status`` within a second meanwhile, the process's open files stay bounded, and
    what is held ends at the head deadline."""
    connections = sum(sources.values())
    assert await slowest_answer(cloud.compute + "/") < 5  # served before the attack
    before = cloud.open_files()
    opened = time.monotonic()
    async with Attack(cloud.compute_port, trickle, sources) as attack:
        slowest = await slowest_answer(cloud.compute + "/", status=other_client_status)
        assert slowest < 1.0, f"another client waited {slowest:.2f} s (open files {before} -> {cloud.open_files()})"
        # The connections beyond the address's share (or the listener's) are answered at once.
        await wait_for(lambda: attack.answered() >= connections - held, 15,
                       f"{attack.answered()} of {connections} connections answered; open files {cloud.open_files()}")
        during = cloud.open_files()
        assert during <= before + held + MAX_LINGERING + 32, (before, during)
        # What the listener holds ends at the head deadline, bytes coming or not.
        await wait_for(lambda: attack.answered() == connections, SHIPPED.http_request_timeout + 10,
                       f"{connections - attack.answered()} connections still held")
        answers = [task.result() for task in attack.answers]
    # Refused at once, in the Compute API's body (or, past the refusals lingering at once, possibly a
    # reset where the client had already sent bytes).
    refused = [answer for answer, _at in answers if answer.startswith(REFUSED)]
    ended = [(answer, at) for answer, at in answers if not answer.startswith(REFUSED)]
    assert len(refused) == connections - held, len(refused)
    assert all(answer.startswith(refusal) and b'"code": ' + refusal[9:12] in answer
               for answer in refused if answer != b"(reset)"), refused[:1]
    assert sum(answer != b"(reset)" for answer in refused) >= min(MAX_LINGERING, len(refused))
    late = max(at for _answer, at in ended) - opened
    assert SHIPPED.http_request_timeout - 1 <= late <= SHIPPED.http_request_timeout + 10, late
    if trickle:
        assert all(answer.startswith(b"HTTP/1.1 408 ") for answer, _at in ended), {a[:40] for a, _ in ended}
    else:
        assert all(answer == b"" for answer, _at in ended), {a[:40] for a, _ in ended}
    await wait_for(lambda: cloud.open_files() <= before + 8, 15, f"open files {before} -> {cloud.open_files()}")
    assert await slowest_answer(cloud.compute + "/") < 1.0  # served again
    print(f"open files before {before}, under attack {during}; another client's slowest answer {slowest * 1000:.0f} ms;"
          f" held connections ended after {late:.1f} s")


async def test_a_thousand_idle_connections_from_one_address_leave_another_client_answered_within_a_second(cloud):
    await _attack_is_bounded(cloud, False, {ATTACKER: CONNECTIONS}, SHIPPED.http_maxconn_per_source,
                             b"HTTP/1.1 429 ")


async def test_a_thousand_trickling_request_heads_from_one_address_leave_another_client_answered_within_a_second(cloud):
    await _attack_is_bounded(cloud, True, {ATTACKER: CONNECTIONS}, SHIPPED.http_maxconn_per_source,
                             b"HTTP/1.1 429 ")


async def test_many_addresses_fill_at_most_the_listener_s_cap_and_the_rest_is_answered_503_at_once(cloud):
    share = SHIPPED.http_maxconn_per_source
    addresses = -(-SHIPPED.http_maxconn // share) + 1  # one address more than the cap needs
    sources = {f"127.0.0.{2 + i}": share for i in range(addresses)}
    await _attack_is_bounded(cloud, False, sources, SHIPPED.http_maxconn, b"HTTP/1.1 503 ",
                             other_client_status=503)


async def test_under_a_hard_open_file_limit_of_1024_the_listeners_share_it_and_one_address_cannot_starve_another(
        hard_limited_cloud):
    lowered = re.search(r"the open-file limit \(ulimit -n\) 1024 leaves each of (\d+) listeners (\d+) connections "
                        r"\((\d+) from one address\)", hard_limited_cloud.log.read_text())
    assert lowered, "no warning that the open-file limit lowered http_maxconn"
    listeners, maxconn, share = map(int, lowered.groups())
    assert listeners * maxconn < 1024 and 0 < share < maxconn, lowered.group(0)
    await _attack_is_bounded(hard_limited_cloud, True, {ATTACKER: CONNECTIONS}, share, b"HTTP/1.1 429 ")
