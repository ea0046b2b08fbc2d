"""What an image's bytes really are, checked before anything trusts its ``disk_format``.

Both places that take image data in run the same rules, with oslo.utils' format
inspector (``oslo_utils.imageutils.format_inspector``, the module Glance and Nova use):

* the Image API on upload (Glance's upload-time inspection with
  ``[image_format] require_image_format_match`` on): refused with 400 and the
  image stays ``queued``, its data discarded;
* the compute host before it builds a disk from a cached base or boots a kernel
  (Nova's ``images.do_image_deep_inspection`` and its base-image re-check):
  the build fails with ``ImageUnacceptable`` and the server goes to ERROR with
  that fault.

The rules, as Nova applies them:

* the declared format must be one the inspector knows (``ami``/``aki``/``ari``
  excepted: QEMU reads those as raw bytes);
* the detected format must be the declared one (a ``raw`` image may carry an
  MBR/GPT partition table, which the inspector names ``gpt``); content that
  looks like two formats at once is refused;
* the inspector's safety checks must pass (except the MBR checks on a kernel
  or ramdisk: a Linux bzImage starts with a legacy boot sector the inspector
  takes for a partition table, and QEMU's ``-kernel``/``-initrd`` read the file
  as bytes, never as a disk; Nova would refuse such a kernel): no qcow2 backing file, external data
  file or unknown incompatible feature, no VMDK other than a single-extent
  ``monolithicSparse``/``streamOptimized`` file (a descriptor naming extents is
  refused), no QED, sane MBR/GPT structures, and so on.

A qcow2 backing file or data file naming ``/etc/shadow`` or a block device is
exactly how a guest would read host files; the checks stop it before QEMU opens
the image.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from oslo_utils.imageutils import format_inspector

from nefos import exceptions

LOG = logging.getLogger(__name__)

AMI_FORMATS = ("ami", "aki", "ari")
# Declared raw, detected as a partition table: still a raw disk (Nova and Glance accept it).
_ALSO_MATCHES = {"raw": {"gpt"}}


@dataclass(frozen=True)
class Inspection:
    format: str  # what QEMU must open the file as (``-f``): ``raw`` for iso/ami/aki/ari/gpt
    virtual_size: int


def inspect(path: str, disk_format: str | None, image_id: str) -> Inspection:
    """Inspect ``path`` (the data of ``image_id``, declared ``disk_format``).

    Raises ``ImageUnacceptable`` naming why when the content is unsafe or not
    what was declared.
    """
    def refuse(reason: str) -> exceptions.ImageUnacceptable:
        LOG.warning("image %s (declared %s) refused: %s", image_id, disk_format, reason)
        return exceptions.ImageUnacceptable(image_id=image_id, reason=reason)

    if not disk_format or (disk_format not in AMI_FORMATS and not format_inspector.get_inspector(disk_format)):
        raise refuse(f"Image not in a supported format (disk_format {disk_format!r} cannot be inspected)")
    try:
        inspector = format_inspector.detect_file_format(path)
        detected = str(inspector)
        if disk_format not in AMI_FORMATS and detected != disk_format \
                and detected not in _ALSO_MATCHES.get(disk_format, ()):
            raise refuse(f"Image content does not match disk_format: declared {disk_format}, "
                         f"the content is {detected}")
        if not (disk_format in AMI_FORMATS and detected == "gpt"):
            inspector.safety_check()
        # The inspector stops reading once it knows the format: a raw disk's size is the file's.
        virtual_size = os.path.getsize(path) if detected in ("raw", "gpt") or disk_format in AMI_FORMATS \
            else int(inspector.virtual_size)
    except format_inspector.SafetyCheckFailed as exc:
        details = "; ".join(f"{name}: {failure}" for name, failure in exc.failures.items())
        raise refuse(f"Image does not pass safety check ({details})") from None
    except format_inspector.ImageFormatError as exc:
        raise refuse(f"Image content does not match disk_format {disk_format} ({exc})") from None
    except exceptions.ImageUnacceptable:
        raise
    except OSError as exc:
        raise refuse(f"Image data could not be read ({exc.strerror or exc})") from None
    except Exception as exc:  # the inspector's own parse failures: never trust such content
        raise refuse(f"Image not in a supported format ({exc})") from None
    qemu_format = "raw" if disk_format in AMI_FORMATS + ("iso",) or detected == "gpt" else detected
    return Inspection(format=qemu_format, virtual_size=virtual_size)
