"""The libvirt/QEMU driver (``compute_driver = "libvirt"``): see ``driver``."""

from nefos.host.virt.libvirt.driver import LibvirtDriver  # noqa: F401
