"""The tiny guest image, built from Debian packages only.

``build`` (``python -m nefos.guest`` or ``scripts/build-guest-image.sh``)
makes a kernel + initramfs pair from Debian's cloud kernel
(``linux-image-cloud-amd64``), ``busybox-static`` and ``dropbear-bin`` (its init:
``nefos.guest.init``); ``nefos.control.image.guest_image`` puts them in
the image service as a kernel image (``aki``), a ramdisk image (``ari``) and a
bootable image (``ami``) whose ``kernel_id`` / ``ramdisk_id`` properties point
at them.
"""

from nefos.guest.build import GuestImage, build, find_kernel  # noqa: F401
