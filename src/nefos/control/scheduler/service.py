"""The scheduler as a component."""

from nefos.control.scheduler.manager import SchedulerManager
from nefos.service import Component, Service, ServiceComponent


def component(rt) -> Component:
    return ServiceComponent("scheduler", Service(rt, "nova-scheduler", "scheduler", rt.cfg.host,
                                                 endpoint=SchedulerManager(rt)))
