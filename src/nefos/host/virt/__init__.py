"""Hypervisor drivers: the base interface, lifecycle events, the fake driver (tests and scale runs),
the libvirt/QEMU driver (``nefos.host.virt.libvirt``)."""


def load_driver(name: str, cfg, host: str):
    if name == "fake":
        from nefos.host.virt.fake import FakeDriver
        return FakeDriver(cfg, host)
    if name == "libvirt":
        from nefos.host.virt.libvirt.driver import LibvirtDriver
        return LibvirtDriver(cfg, host)
    raise ValueError(f"unknown compute_driver {name!r}")
