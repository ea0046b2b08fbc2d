"""The conductor as a component: its manager on ``conductor``, and the re-drive of builds no
conductor took (every ``build_redrive_interval`` seconds, and at once when it starts), and the
release of ports that deleted servers still hold, the closing of actions whose request died and
the purge of expired external events and of the event stream's log (every minute), and the
event stream's host.up / host.down (every ``event_host_watch_interval`` seconds)."""

from nefos.control.conductor.manager import ConductorManager
from nefos.service import Component, Service, ServiceComponent


def component(rt) -> Component:
    manager = ConductorManager(rt)
    service = Service(rt, "nova-conductor", "conductor", rt.cfg.host, endpoint=manager)
    service.add_periodic("redrive_stranded_builds", rt.cfg.build_redrive_interval,
                         manager.redrive_stranded_builds, initial_delay=0)
    service.add_periodic("release_ports_of_deleted_servers", 60, manager.release_ports_of_deleted_servers)
    service.add_periodic("finish_abandoned_actions", 60, manager.finish_abandoned_actions)
    service.add_periodic("purge_expired_external_events", 60, manager.purge_expired_external_events)
    service.add_periodic("purge_event_log", 60, manager.purge_event_log)
    service.add_periodic("report_host_liveness", rt.cfg.event_host_watch_interval, manager.report_host_liveness)
    return ServiceComponent("conductor", service)
