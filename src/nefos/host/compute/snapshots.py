"""Images of a server's root disk on its compute host: createImage, createBackup and shelve's snapshot.

The compute API creates the image record (queued, so its id can be answered at
once); the host writes the guest's disk to a file with the driver
(``task_state`` image_pending_upload, or shelving_image_pending_upload), uploads
it (image_uploading) and clears the task state. Every step is a compare-and-swap
on the task state, so a delete meanwhile wins; an image whose snapshot failed or
was abandoned is deleted, never left queued. A backup then keeps the newest
``rotation`` backups of its type (Nova's ``_rotate_backups``).

Writing and uploading a large disk can take longer than ``task_state_timeout``, the deadline
after which a task state that has not changed puts the server in ERROR: while the file grows or
bytes go up, the host says so (the instance's ``updated_at``, a compare-and-swap on the task
state), so a snapshot is cut short only when it stops making progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from pathlib import Path
from typing import Callable

from nefos import exceptions, fileperms
from nefos.model.state_machine import leaves, step_save

LOG = logging.getLogger(__name__)

async def snapshot_to_image(manager, ctx, instance: dict, image_id: str, *, operation: str) -> None:
    """Write the guest's disk into the queued image ``image_id``; the instance's task state goes
    through ``operation``'s (createImage, createBackup, shelve) steps ``pending_upload`` and
    ``uploading`` of the state table (the caller clears it). On any failure the image is deleted
    and the error raised."""
    uuid = instance["uuid"]
    pending, uploading = leaves(f"{operation}.pending_upload"), leaves(f"{operation}.uploading")
    try:
        instance = await manager.conductor.instance_save(None, uuid, **step_save(f"{operation}.pending_upload"))
        workdir = fileperms.private_dir(Path(manager.rt.cfg.state_dir) / "snapshots")
        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            target = Path(tmp) / "disk"
            async with reporting_progress(manager, uuid, pending, lambda: _size(target)):
                disk_format = await manager.driver.snapshot(ctx, instance, target)
            await manager.conductor.instance_save(None, uuid, **step_save(f"{operation}.uploading"))
            sent = [0]
            async with reporting_progress(manager, uuid, uploading, lambda: sent[0]):
                await manager.image_api.upload_file(ctx, image_id, target, disk_format,
                                                    on_chunk=lambda n: sent.__setitem__(0, sent[0] + n))
    except BaseException:
        with contextlib.suppress(Exception):
            await manager.image_api.delete(ctx, image_id)
        raise


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def progress_interval(cfg) -> float:
    """How often a long step says it is moving: well within ``task_state_timeout``."""
    timeout = cfg.task_state_timeout
    return min(10.0, timeout / 4) if timeout > 0 else 10.0


@contextlib.asynccontextmanager
async def reporting_progress(manager, uuid: str, task_state: str, measure: Callable[[], int]):
    """While the block runs, renew the instance's deadline each time ``measure()`` has grown
    (checked every ``progress_interval``); when the instance left ``task_state`` meanwhile (a
    delete, the deadline passed), whether or not the block moved, it is cancelled and that is
    raised."""
    block = asyncio.current_task()
    failure: list[BaseException] = []

    async def watch() -> None:
        seen = measure()
        while True:
            await asyncio.sleep(progress_interval(manager.rt.cfg))
            now = measure()
            try:
                if now == seen:
                    # No progress: the deadline may have ended the step meanwhile (the server in
                    # ERROR, its task state cleared); the step stops rather than finish late.
                    current = (await manager.conductor.instance_get(None, uuid))["task_state"]
                    if current != task_state:
                        raise exceptions.UnexpectedTaskStateError(instance_uuid=uuid, expected=task_state,
                                                                  actual=current)
                    continue
                seen = now
                await manager.conductor.instance_save(None, uuid, {}, expected_task_state=[task_state])
            except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError,
                    exceptions.InstanceInvalidState) as exc:
                failure.append(exc)
                block.cancel()
                return

    watcher = asyncio.create_task(watch(), name=f"progress:{uuid}")
    try:
        yield
    except asyncio.CancelledError:
        if failure:
            block.uncancel()  # the cancellation was this watcher's: the reason replaces it
            raise failure[0] from None
        raise
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def rotate_backups(manager, ctx, instance: dict, backup_type: str, rotation: int) -> None:
    """Delete the oldest backups of ``backup_type`` beyond the newest ``rotation``."""
    backups = await manager.image_api.list_backups(ctx, instance["uuid"], backup_type)
    excess = len(backups) - rotation
    for image in backups[:max(excess, 0)]:
        LOG.info("instance %s: rotating out backup %s (%s)", instance["uuid"], image["id"], image["name"])
        await manager.image_api.delete(ctx, image["id"])


async def image_meta(manager, ctx, image_id: str) -> dict:
    """What spawn needs of an image: its id, declared disk format and properties. Its kernel and
    ramdisk are looked up as the caller again: the image may have changed since the API checked."""
    return await manager.conductor.image_meta(ctx, image_id)  # the host reads no database

