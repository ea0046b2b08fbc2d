"""The network service's notifier: port changes become Compute API external events.

Neutron's ``neutron.notifiers.nova`` for Nefos. For ports whose device_owner
is a compute owner (``compute:<zone>``) and whose device_id is the server:

* status DOWN/BUILD -> ACTIVE: ``network-vif-plugged`` (completed); -> ERROR:
  ``network-vif-plugged`` (failed); ACTIVE -> DOWN: ``network-vif-unplugged``
  (``notify_nova_on_port_status_changes``);
* fixed IPs, MAC or floating IPs (associated or disassociated) changed:
  ``network-changed`` (one per port in a batch); the port deleted: ``network-vif-deleted``
  (``notify_nova_on_port_data_changes``).

Durable outbox: the events are rows of ``port_event_outbox`` written by a
hook *inside the transaction that changes the port* — an event exists exactly
when the change committed, a restart of the network service loses none, and
the port update never waits for (nor fails because of) the Compute API. After
the commit the sender task posts the new rows at once (from memory, no claim
round trip) in one ``POST /v2.1/os-server-external-events`` as the service
user. Rows it could not deliver, and rows another process left (a crash, a
restart), are claimed from the table with a lease, so several network service
processes never send one row at the same time (a row younger than
``FRESH_GRACE`` is left to the process that wrote it; a duplicate would be
harmless anyway: the Compute API's inbox is idempotent). Batching follows
Neutron's notifier: the first event after a quiet spell goes at once, then at
most one batch per ``send_events_interval`` seconds (0: no batching); a batch
carries one ``network-changed`` per port (coalesced). Unlike Neutron,
``network-vif-plugged`` is never held by the window: a build is waiting for it. Rows the Compute API
answered (200, or a 404/422/400 for an event or the whole batch that retrying cannot change) are
deleted; the others are retried with a backoff (1, 2, 4 ... 30 s) until the
Compute API answers.

Request ids: each row keeps the request id of the change that wrote it (the L2
agent's report for a status change; the global request id when the change had
one). The events of one request id are posted together, with it as
``X-OpenStack-Request-ID``, so the Compute API and the compute host log them
under it as their global request id: one grep follows a plugged device from the
agent to the waiting compute. A batch with several request ids goes as several
concurrent requests, one per request id, up to ``MAX_REQUESTS_PER_BATCH``; the
events of further request ids share one more request (under such load the
notifier's own log line still names each event's request id).

Authentication: with ``auth_strategy = keystone`` a password token of the
service user (``nefos`` in project ``service``, password from
``service_password`` or ``<state_dir>/passwords.yaml``) from the identity API,
renewed before it expires or when refused; the Compute API URL comes from the
token's catalog. With ``noauth`` the noauth headers of a caller with the
``service`` role, and the URL from the configuration.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import types
import uuid as uuidlib

import httpx
from sqlalchemy import delete, insert, select, update

from nefos.db.models import PortEventOutbox, utcnow
from nefos.db.session import after_commit
from nefos.clients.identity.service_auth import ServiceAuth
from nefos.waiting import event_set_within
from nefos.http_client import verified_tls

LOG = logging.getLogger(__name__)

VIF_PLUGGED = "network-vif-plugged"
VIF_UNPLUGGED = "network-vif-unplugged"
VIF_DELETED = "network-vif-deleted"
NETWORK_CHANGED = "network-changed"
COMPUTE_OWNER_PREFIX = "compute:"
STATUS_MAP = {"ACTIVE": "completed", "ERROR": "failed", "DOWN": "completed"}

BATCH_SIZE = 200
LEASE_SECONDS = 60.0
POLL_SECONDS = 5.0  # look for rows of other processes (or a previous run) this often when idle
FRESH_GRACE = 10.0  # seconds a new row is left to the process that wrote it
MAX_BACKOFF = 30.0
HTTP_TIMEOUT = 10.0
MAX_REQUESTS_PER_BATCH = 8  # requests (one per request id) a batch may become
_INSERT_EVENT = insert(PortEventOutbox.__table__)


def is_compute_port(port: dict | None) -> bool:
    return bool(port and port.get("device_id") and
                (port.get("device_owner") or "").startswith(COMPUTE_OWNER_PREFIX))


def port_events(cfg, before: dict | None, after: dict | None) -> list[dict]:
    """The external events (server_uuid, name, tag, status) one port change produces."""
    events: list[dict] = []
    if after is None:  # deleted
        if cfg.notify_nova_on_port_data_changes and is_compute_port(before):
            events.append({"server_uuid": before["device_id"], "name": VIF_DELETED, "tag": before["id"],
                           "status": "completed"})
        return events
    if not is_compute_port(after):
        return events
    old_status, new_status = (before or {}).get("status"), after.get("status")
    if cfg.notify_nova_on_port_status_changes and old_status != new_status:
        name = None
        if old_status == "ACTIVE" and new_status == "DOWN":
            name = VIF_UNPLUGGED
        elif old_status in (None, "DOWN", "BUILD") and new_status in ("ACTIVE", "ERROR"):
            name = VIF_PLUGGED
        if name:
            events.append({"server_uuid": after["device_id"], "name": name, "tag": after["id"],
                           "status": STATUS_MAP[new_status]})
        else:
            LOG.debug("port %s: ignoring status change %s -> %s", after["id"], old_status, new_status)
    if (cfg.notify_nova_on_port_data_changes and before is not None
            and before.get("device_id") == after["device_id"]):
        ips = lambda p: sorted((f["subnet_id"], f["ip_address"]) for f in p.get("fixed_ips") or [])  # noqa: E731
        if (ips(before) != ips(after) or before.get("mac_address") != after.get("mac_address")
                or before.get("floating_ips") != after.get("floating_ips")):
            events.append({"server_uuid": after["device_id"], "name": NETWORK_CHANGED, "tag": after["id"],
                           "status": "completed"})
    return events


class ComputeEventsClient:
    """Posts events to the Compute API as the service user (``nefos.clients.identity.service_auth``)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self._http: httpx.AsyncClient | None = None
        self.service = ServiceAuth(cfg)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=HTTP_TIMEOUT, verify=verified_tls())
        return self._http

    def forget_token(self) -> None:
        self.service.forget()

    async def _auth(self) -> tuple[dict, str]:
        """The service user's headers and the Compute API URL (the token's catalog, else the config's)."""
        from nefos.clients.identity import catalog
        headers = await self.service.headers(self.http)
        return headers, self.service.endpoint("compute") or catalog.service_url(self.cfg, "compute")

    async def send(self, events: list[dict], request_id: str | None = None) -> httpx.Response:
        extra = {"X-OpenStack-Request-ID": request_id} if request_id else {}
        headers, url = await self._auth()
        r = await self.http.post(url.rstrip("/") + "/os-server-external-events",
                                 json={"events": events}, headers={**headers, **extra})
        if r.status_code == 401 and "X-Auth-Token" in headers:
            self.forget_token()  # expired or revoked: once more with a fresh one
            headers, url = await self._auth()
            r = await self.http.post(url.rstrip("/") + "/os-server-external-events",
                                     json={"events": events}, headers={**headers, **extra})
        return r


class Notifier:
    """The outbox writer (a port change hook) and its sender task."""

    def __init__(self, rt, client: ComputeEventsClient | None = None):
        self.rt = rt
        self.client = client or ComputeEventsClient(rt.cfg)
        self.owner = f"{rt.cfg.host}:{uuidlib.uuid4().hex[:12]}"
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._fresh: list[dict] = []  # committed rows this process posts at once
        self.sent: int = 0  # events the Compute API accepted (for tests and benchmarks)

    # The hook ------------------------------------------------------------------
    async def on_port_change(self, s, ctx, before: dict | None, after: dict | None) -> None:
        """Called inside the port's transaction: queue its events in the outbox."""
        events = port_events(self.rt.cfg, before, after)
        if not events:
            return
        now = utcnow()
        request_id = (ctx.global_request_id or ctx.request_id) if ctx is not None else None
        rows = [{"server_uuid": ev["server_uuid"], "name": ev["name"], "tag": ev["tag"], "status": ev["status"],
                 "created_at": now, "attempts": 0, "next_attempt_at": now, "request_id": request_id}
                for ev in events]
        for ev in events:
            LOG.info("port %s: event %s for server %s queued", ev["tag"], ev["name"], ev["server_uuid"])
        # In the port's transaction: if the events cannot be written, the change does not happen
        # either (an event exists exactly when its change committed).
        for row in rows:  # one row at a time: its id from the insert (RETURNING or lastrowid)
            row["id"] = (await s.execute(_INSERT_EVENT, row)).inserted_primary_key[0]
        fresh = s.info.setdefault("nefos_notifier_rows", [])
        if not fresh:
            after_commit(s, lambda: self._after_commit(fresh))
        fresh.extend(_as_dict(types.SimpleNamespace(lease_owner=None, lease_until=None, **row)) for row in rows)

    def _after_commit(self, committed: list[dict]) -> None:
        # Runs in the event loop's thread (the async session's greenlet): hand the committed
        # rows to the sender, which posts them at once (no claim: see _claim's grace period).
        if self._task is not None:
            self._fresh.extend(committed)
            self._wake.set()

    # The sender ----------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="network:nova-notifier")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._fresh.clear()
        await self.client.close()

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        first = True  # at start: everything due, including what a previous run left unsent
        timeout = 0.0
        while True:
            try:
                if timeout > 0:
                    await event_set_within(self._wake, timeout)
                self._wake.clear()
                if self._fresh and not first:
                    sent, next_due = await self._send(self._take_fresh()), POLL_SECONDS
                else:
                    sent, next_due = await self.flush(include_fresh=first)
                    first = False
            except asyncio.CancelledError:
                raise
            except Exception:
                LOG.exception("the external events sender failed; retrying")
                sent, next_due = 0, 1.0
            interval = self.rt.cfg.send_events_interval
            if sent and interval > 0:
                await self._batch_window(interval)
            timeout = 0.0 if (self._wake.is_set() or self._fresh) else min(next_due, POLL_SECONDS)

    async def _batch_window(self, interval: float) -> None:
        """Hold what arrives for ``interval`` seconds as the next batch, except network-vif-plugged.

        A build waits for network-vif-plugged and Neutron's window would add up to the
        whole interval to its boot when another server's events opened the window just before. So
        those go at once, one request at a time: under load they still batch, by whatever arrives
        while the previous request is in flight. The other events keep Neutron's batching.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + interval
        while (remaining := deadline - loop.time()) > 0:
            if not await event_set_within(self._wake, remaining):
                return
            self._wake.clear()
            urgent = [r for r in self._fresh if r["name"] == VIF_PLUGGED][:BATCH_SIZE]
            if not urgent:
                continue
            taken = {r["id"] for r in urgent}
            self._fresh[:] = [r for r in self._fresh if r["id"] not in taken]
            try:
                await self._send(urgent)
            except asyncio.CancelledError:
                raise
            except Exception:  # the rows stay in the outbox: the claim loop retries them
                LOG.exception("sending network-vif-plugged events failed; retrying")

    def _take_fresh(self) -> list[dict]:
        batch, self._fresh[:] = self._fresh[:BATCH_SIZE], self._fresh[BATCH_SIZE:]
        return batch

    async def _claim(self, include_fresh: bool) -> tuple[list[dict], float]:
        """Lease the due rows (up to BATCH_SIZE); also how long until the next row is due.

        Rows younger than FRESH_GRACE that were never tried belong to the process that wrote them
        (it posts them from memory right after its commit) unless ``include_fresh``: a sender
        starting up takes everything, a duplicate being harmless (the Compute API's inbox is
        idempotent), a lost event not.
        """
        now = utcnow()
        free = (PortEventOutbox.lease_until.is_(None)) | (PortEventOutbox.lease_until < now)
        due = [PortEventOutbox.next_attempt_at <= now, free]
        if not include_fresh:
            due.append((PortEventOutbox.attempts > 0) |
                       (PortEventOutbox.created_at < now - dt.timedelta(seconds=FRESH_GRACE)))
        async with self.rt.db.transaction() as s:
            ids = list((await s.execute(select(PortEventOutbox.id).where(*due).order_by(PortEventOutbox.id)
                                        .limit(BATCH_SIZE))).scalars())
            rows: list[dict] = []
            if ids:
                await s.execute(update(PortEventOutbox).where(PortEventOutbox.id.in_(ids), free).values(
                    lease_owner=self.owner, lease_until=now + dt.timedelta(seconds=LEASE_SECONDS))
                    .execution_options(synchronize_session=False))
                rows = [_as_dict(r) for r in (await s.execute(select(PortEventOutbox).where(
                    PortEventOutbox.id.in_(ids), PortEventOutbox.lease_owner == self.owner)
                    .order_by(PortEventOutbox.id))).scalars()]
            later = (await s.execute(select(PortEventOutbox.next_attempt_at).where(
                PortEventOutbox.next_attempt_at > now).order_by(PortEventOutbox.next_attempt_at).limit(1))).first()
        next_due = (later[0] - now).total_seconds() if later else POLL_SECONDS
        if len(ids) == BATCH_SIZE:
            next_due = 0.0
        return rows, max(next_due, 0.05)

    async def flush(self, include_fresh: bool = True) -> tuple[int, float]:
        """Claim and send one batch of due events from the outbox; (events sent, seconds until more are due)."""
        rows, next_due = await self._claim(include_fresh)
        if not rows:
            return 0, next_due
        fresh_ids = {r["id"] for r in rows}
        self._fresh[:] = [r for r in self._fresh if r["id"] not in fresh_ids]
        return await self._send(rows), next_due

    async def _send(self, rows: list[dict]) -> int:
        """Post ``rows``' events (one request per request id); delete what was answered, reschedule
        the rest."""
        # One network-changed per (server, port) in a batch: the port is refreshed when it is handled.
        groups: dict[str | None, list] = {}
        seen, done = set(), []
        for row in rows:
            key = (row["server_uuid"], row["name"], row["tag"]) if row["name"] == NETWORK_CHANGED else row["id"]
            if key in seen:
                done.append(row["id"])
                continue
            seen.add(key)
            ev = {"server_uuid": row["server_uuid"], "name": row["name"], "status": row["status"]}
            if row["tag"]:
                ev["tag"] = row["tag"]
            groups.setdefault(row.get("request_id"), []).append((row, ev))
        if len(groups) > MAX_REQUESTS_PER_BATCH:  # keep the Compute API's load bounded
            keys = list(groups)
            rest = [item for key in keys[MAX_REQUESTS_PER_BATCH - 1:] for item in groups.pop(key)]
            groups[None] = groups.get(None, []) + rest
        retry: list[dict] = []
        if len(groups) == 1:  # the usual case: no task hop before the post
            answers = [await self._post(*next(iter(groups.items())))]
        else:
            answers = await asyncio.gather(*(self._post(rid, events) for rid, events in groups.items()))
        for group_done, group_retry in answers:
            done += group_done
            retry += group_retry
        now = utcnow()
        async with self.rt.db.transaction() as s:
            if done:
                await s.execute(delete(PortEventOutbox).where(PortEventOutbox.id.in_(done)))
            for row in retry:
                backoff = min(2.0 ** row["attempts"], MAX_BACKOFF)
                await s.execute(update(PortEventOutbox).where(PortEventOutbox.id == row["id"]).values(
                    attempts=row["attempts"] + 1, next_attempt_at=now + dt.timedelta(seconds=backoff),
                    lease_owner=None, lease_until=None))
        if retry:
            self._wake_at(min(2.0 ** r["attempts"] for r in retry))
        return sum(len(events) for events in groups.values()) - len(retry)

    async def _post(self, request_id: str | None, events: list[tuple[dict, dict]]) -> tuple[list, list]:
        """One request for the events of ``request_id``: (row ids answered, rows to retry)."""
        from nefos.context import RequestContext, current_context
        token = current_context.set(RequestContext(project_id=None, user_id=None, roles=["service"],
                                                   request_id=request_id) if request_id else None)
        try:
            return await self._post_events(request_id, events)
        finally:
            current_context.reset(token)

    async def _post_events(self, request_id: str | None, events: list[tuple[dict, dict]]) -> tuple[list, list]:
        done: list = []
        retry: list[dict] = []
        LOG.info("sending events: %s", [dict(ev, request_id=row.get("request_id")) if row.get("request_id")
                                         not in (None, request_id) else ev for row, ev in events])
        try:
            response = await self.client.send([ev for _row, ev in events], request_id=request_id)
        except Exception as exc:  # unreachable, or no credentials yet
            LOG.warning("cannot send %d external event(s) to the Compute API: %s", len(events), exc)
            retry = [row for row, _ev in events]
        else:
            if response.status_code in (200, 207):
                try:
                    answers = response.json().get("events") or []
                except ValueError:
                    answers = []
                for (row, ev), answer in zip(events, answers + [None] * (len(events) - len(answers))):
                    code = (answer or {}).get("code", 200 if response.status_code == 200 else None)
                    if code == 200:
                        done.append(row["id"])
                        LOG.info("Nova event response: %s", answer)
                    elif code in (400, 404, 422):
                        done.append(row["id"])  # unknown server, not on a host, ...: no retry helps
                        LOG.info("the Compute API refused event %s:%s for server %s (%s)",
                                 ev["name"], ev.get("tag"), ev["server_uuid"], code)
                    else:
                        retry.append(row)
                self.sent += sum(1 for a in answers if (a or {}).get("code") == 200)
            elif response.status_code == 404:  # no event named a server on a host: no retry helps (Neutron)
                done += [row["id"] for row, _ev in events]
                LOG.info("the Compute API found no server for any of events %s", [ev for _row, ev in events])
            elif response.status_code == 400:
                done += [row["id"] for row, _ev in events]
                LOG.error("the Compute API rejected a batch of external events: %s", response.text[:500])
            else:
                LOG.warning("the Compute API answered %s to external events; retrying: %s",
                            response.status_code, response.text[:200])
                retry = [row for row, _ev in events]
        return done, retry

    def _wake_at(self, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self._wake.set)


def _as_dict(row: PortEventOutbox) -> dict:
    return {"id": row.id, "server_uuid": row.server_uuid, "name": row.name, "tag": row.tag or "",
            "status": row.status, "attempts": row.attempts or 0, "request_id": row.request_id}


async def pending_events(db) -> list[dict]:
    """What the outbox holds (tests, diagnostics)."""
    async with db.reader() as s:
        return [r.to_dict() for r in (await s.execute(select(PortEventOutbox)
                                                      .order_by(PortEventOutbox.id))).scalars()]
