"""The libvirt/QEMU driver (``compute_driver = "libvirt"``): see ``driver``.

Nothing is imported here: ``nefos up`` reads ``probe`` on every start, and a cloud of fake hosts
should not load the driver, libvirt-python and the image tools for it.
"""
