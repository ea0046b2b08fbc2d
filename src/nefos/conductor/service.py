"""The conductor as a component."""

from nefos.conductor.manager import ConductorManager
from nefos.service import Component, Service, ServiceComponent


def component(rt) -> Component:
    return ServiceComponent("conductor", Service(rt, "nova-conductor", "conductor", rt.cfg.host,
                                                 endpoint=ConductorManager(rt)))
