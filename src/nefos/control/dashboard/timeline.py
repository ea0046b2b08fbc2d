"""A server action's steps as a timeline: each step a bar placed by when it started and as long as
it took, so that why a boot was slow shows at a glance."""

from __future__ import annotations

import datetime as dt

# What each recorded step is, in words a user of the console knows.
STEP_LABELS = {
    "conductor_schedule_and_build_instances": "schedule",
    "compute__do_build_and_run_instance": "build (whole)",
    "compute_claim_resources": "claim resources",
    "compute_allocate_network": "network allocation",
    "compute_prep_block_device": "block devices",
    "compute_spawn": "spawn",
    "compute_wait_for_vif_plugged": "vif wait",
    "compute_power_on_instance": "power on",
    "api_external_instance_event": "event received",
    "compute_external_instance_event": "event delivered",
}


def _when(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def bars(action: dict, now: dt.datetime | None = None) -> list[dict]:
    """The steps of ``action`` (an os-instance-actions detail with ``events``), in the order they
    started: ``label``, ``name``, ``seconds`` (None while running), ``left`` and ``width`` (percent of
    the whole action), ``result``."""
    now = now or dt.datetime.now(dt.timezone.utc)
    steps = []
    for event in action.get("events") or []:
        start = _when(event.get("start_time"))
        if start is None:
            continue
        finish = _when(event.get("finish_time"))
        steps.append((start, finish, event))
    if not steps:
        return []
    origin = min([s for s, _f, _e in steps] + [t for t in [_when(action.get("start_time"))] if t])
    end = max((f or now) for _s, f, _e in steps)
    total = max((end - origin).total_seconds(), 1e-3)
    out = []
    for start, finish, event in sorted(steps, key=lambda item: item[0]):
        seconds = (finish - start).total_seconds() if finish else None
        shown = (finish or now) - start
        out.append({
            "name": event.get("event"),
            "label": STEP_LABELS.get(event.get("event"), event.get("event")),
            "seconds": seconds,
            "left": round((start - origin).total_seconds() / total * 100, 2),
            "width": round(max(shown.total_seconds() / total * 100, 0.5), 2),
            "result": event.get("result") or ("running" if finish is None else ""),
        })
    return out
