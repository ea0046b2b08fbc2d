"""The ``nefos`` command: the all-in-one cloud, each service on its own, and the schema."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from nefos import task_report
from nefos.config import Config, load_config
from nefos.exceptions import ConfigError
from nefos.service import tune_gc_for_service

app = typer.Typer(help="Nefos: an OpenStack-compatible compute cloud.", no_args_is_help=True,
                  add_completion=False)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")
# soft_wrap: a long line (the export line, a URL) is never broken in two when the output is not a
# terminal (a log, `| tee`), where Rich would otherwise fold it at 80 columns.
console = Console(soft_wrap=True)

ConfigOpt = typer.Option(None, "--config", "-c", help="INI config file (options as in nefos.config.Config).")
StateDirOpt = typer.Option(None, "--state-dir", help="Where state lives (default ./.nefos).")
DebugOpt = typer.Option(False, "--debug", help="Debug logging.")
LogFormatOpt = typer.Option(None, "--log-format", help="Log lines as text (the default) or json (log_format).")
LogFileOpt = typer.Option(None, "--log-file", help="Append log lines to this file, not standard error (log_file).")


@contextlib.contextmanager
def _progress(what: str):
    """A spinner while a slow start-up step runs, then a line saying it is done and how long it took."""
    started = time.monotonic()
    with console.status(f"{what}..."):
        yield
    console.print(f"[green]✓[/green] {what} ({time.monotonic() - started:.1f} s)", highlight=False)


def start_logging(cfg: Config, debug: bool) -> None:
    from nefos.logs import setup_logging
    setup_logging(debug=debug, log_format=cfg.log_format, log_file=cfg.log_file)


def _config(config: Optional[Path], state_dir: Optional[Path], **overrides) -> Config:
    try:
        return load_config(config, state_dir=state_dir, **overrides)
    except ConfigError as exc:
        console.print(f"[bold red]nefos: {exc}[/bold red]", highlight=False)
        raise typer.Exit(2)


def _serve_until_signal(open_cloud, announce) -> None:
    """Run the cloud ``open_cloud()`` returns until SIGINT/SIGTERM, then stop it cleanly."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        task_report.install(loop)  # SIGUSR2: what every task waits on, even while starting
        # A SIGTERM while it starts (waiting for the broker, say) stops it there.
        opening = asyncio.create_task(open_cloud())
        stop_asked = asyncio.create_task(stopping.wait())
        await asyncio.wait({opening, stop_asked}, return_when=asyncio.FIRST_COMPLETED)
        if not opening.done():
            console.print("[bold]Stopping...[/bold]")
            opening.cancel()
            await asyncio.gather(opening, return_exceptions=True)
            return
        stop_asked.cancel()
        cloud = opening.result()
        tune_gc_for_service()
        try:
            await announce(cloud)
            await stopping.wait()
        finally:
            console.print("[bold]Stopping...[/bold]")
            await cloud.stop()
            await cloud.rt.close()

    try:
        asyncio.run(main())
    except ConfigError as exc:  # refused at start (e.g. noauth on a non-loopback address)
        console.print(f"[bold red]nefos: {exc}[/bold red]", highlight=False)
        raise typer.Exit(2)


@app.command()
def up(config: Optional[Path] = ConfigOpt, state_dir: Optional[Path] = StateDirOpt,
       fake_hosts: Optional[int] = typer.Option(
           None, "--fake-hosts", help="Start this many fake compute hosts (the fake driver; without "
                                      "it, one compute host with the chosen driver)."),
       driver: Optional[str] = typer.Option(
           None, "--driver", help="Compute driver: fake, libvirt or auto (libvirt when usable; the "
                                  "default unless the configuration sets compute_driver)."),
       debug: bool = DebugOpt, log_format: Optional[str] = LogFormatOpt, log_file: Optional[str] = LogFileOpt) -> None:
    """Start the whole cloud in one process (SQLite, in-process bus; libvirt/QEMU or a fake hypervisor)."""
    cfg = _config(config, state_dir, log_format=log_format, log_file=log_file)
    start_logging(cfg, debug)
    from nefos.cmd.allinone import open_cloud
    if fake_hosts is not None:
        if fake_hosts < 1:
            console.print("[bold red]nefos: --fake-hosts must be at least 1[/bold red]")
            raise typer.Exit(2)
        if driver is not None and driver.lower() != "fake":
            console.print(f"[bold red]nefos: --fake-hosts starts fake compute hosts; it cannot be "
                          f"combined with --driver {driver}[/bold red]", highlight=False)
            raise typer.Exit(2)
    hosts = {"count": fake_hosts or 1}

    async def start():
        from nefos.host.virt.libvirt.probe import choose_compute_driver
        try:
            if fake_hosts is not None:
                chosen, why = "fake", f"--fake-hosts {fake_hosts}"
            else:
                with _progress("Probing the hypervisor (libvirt, KVM)"):
                    chosen, why = await choose_compute_driver(cfg, driver)
        except RuntimeError as exc:
            console.print(f"[bold red]{exc}[/bold red]")
            raise typer.Exit(1)
        cfg.compute_driver = chosen
        console.print(f"compute driver: [bold]{chosen}[/bold] ({why})")
        try:
            with _progress("Starting Nefos (migrating the database, starting services)"):
                cloud = await open_cloud(cfg, fake_hosts=hosts["count"])
        except RuntimeError as exc:  # e.g. a port already taken: say which, no traceback
            console.print(f"[bold red]nefos: {exc}[/bold red]", highlight=False)
            raise typer.Exit(1)
        if chosen == "libvirt":
            from nefos.control.network.external import ensure_public_network
            try:  # the external network "public" on br-ex-nefos, once
                with _progress("Setting up the external network public on br-ex-nefos"):
                    await ensure_public_network(cloud.rt)
            except Exception as exc:  # the cloud still runs; routers just have no external network
                console.print(f"[yellow]the external network could not be set up: {exc}[/yellow]")
            from nefos.control.image.guest_image import ensure_guest_image
            try:  # built once (a minute or two), then found in the state directory
                with _progress("Building or reusing the tiny guest image"):
                    hosts["guest"] = await ensure_guest_image(cloud.rt)
            except Exception as exc:  # the cloud still runs; images just do not boot a kernel
                console.print(f"[yellow]the tiny guest image could not be built: {exc}[/yellow]")
        return cloud

    async def announce(cloud):
        from nefos.control.identity.bootstrap import bootstrap, write_clouds_yaml
        path = write_clouds_yaml(cloud.rt, await bootstrap(cloud.rt)).resolve()
        console.print("[bold green]Nefos is up.[/bold green]")
        for name, url in cloud.endpoints().items():
            console.print(f"  {name:9} {url}", markup=False, highlight=False)
        console.print(f"  database  {cfg.effective_database_url}", markup=False, highlight=False)
        if cfg.compute_driver == "fake":
            console.print(f"  hosts     {hosts['count']} fake compute host(s)")
        else:
            console.print(f"  hosts     {cfg.host} ({cfg.compute_driver})")
        if hosts.get("guest"):
            g = hosts["guest"]
            console.print(f"  image     nefos-tiny {g['image_id']} boots the tiny guest "
                          f"(kernel {g['kernel_version']}, busybox initramfs)")
        console.print(f"\nexport OS_CLIENT_CONFIG_FILE={path}", markup=False, highlight=False)
        console.print("openstack --os-cloud nefos server list")

    _serve_until_signal(start, announce)


@app.command()
def status(config: Optional[Path] = ConfigOpt, state_dir: Optional[Path] = StateDirOpt,
           clouds: Optional[Path] = typer.Option(None, "--clouds", help="The clouds.yaml to read the admin's "
                                                 "credentials from (default: the state directory's).")) -> None:
    """Show a running cloud: its web console, endpoints, compute hosts (up/down, enabled/disabled, use) and
    servers."""
    from nefos.cmd.status import StatusError, gather, render
    cfg = _config(config, state_dir)
    try:
        state = gather(clouds or Path(cfg.state_dir) / "clouds.yaml")
    except StatusError as exc:
        console.print(f"[bold red]nefos: {exc}[/bold red]", highlight=False)
        raise typer.Exit(1)
    if cfg.dashboard_enabled:
        from nefos.control.dashboard.service import running_url
        state["dashboard"] = running_url(cfg)
    render(state, console)


@app.command()
def events(config: Optional[Path] = ConfigOpt, state_dir: Optional[Path] = StateDirOpt,
           clouds: Optional[Path] = typer.Option(None, "--clouds", help="The clouds.yaml to read credentials "
                                                 "from (default: the state directory's)."),
           cloud: str = typer.Option("nefos-admin", "--os-cloud", help="Whose events: the admin sees every "
                                     "project's and the hosts', a project's user their project's."),
           server: list[str] = typer.Option([], "--server", help="Only this server's events (repeatable)."),
           kind: list[str] = typer.Option([], "--type", help="Only this type or family: server.updated, "
                                          "server.step, host, ... (repeatable)."),
           project: list[str] = typer.Option([], "--project", help="Only this project's servers (admin)."),
           since: Optional[str] = typer.Option(None, "--since", help="Start after this event id (the log "
                                               "keeps event_log_retention seconds) instead of now."),
           count: Optional[int] = typer.Option(None, "--count", min=1, help="Stop after this many events."),
           timeout: Optional[float] = typer.Option(None, "--timeout", min=0, help="Stop after this many "
                                                   "seconds.")) -> None:
    """Follow the cloud's events as they happen: servers created, changing state and deleted, their
    steps, external events, hosts going up, down, disabled and enabled."""
    import asyncio

    from nefos.cmd.event_tail import tail
    from nefos.cmd.status import StatusError
    cfg = _config(config, state_dir)
    params = {"server_id": server, "type": kind, "project_id": project}
    if timeout is not None:
        params["timeout"] = str(timeout)
    try:
        asyncio.run(tail(clouds or Path(cfg.state_dir) / "clouds.yaml", cloud=cloud,
                         params={k: v for k, v in params.items() if v}, last_event_id=since, count=count,
                         console=console))
    except StatusError as exc:
        console.print(f"[bold red]nefos: {exc}[/bold red]", highlight=False)
        raise typer.Exit(1)
    except KeyboardInterrupt:
        pass


def _run_components(cfg: Config, build, *, database: bool = True) -> None:
    from nefos.cmd.allinone import run_components
    from nefos.service import Runtime

    async def start():
        rt = await Runtime.open(cfg, database=database)
        try:
            return await run_components(rt, build(rt))
        except RuntimeError as exc:  # e.g. a port already taken: say which, no traceback
            console.print(f"[bold red]nefos: {exc}[/bold red]", highlight=False)
            raise typer.Exit(1)

    async def announce(cloud):
        console.print(f"[green]{', '.join(c.name for c in cloud.components)} started[/green]")

    _serve_until_signal(start, announce)


def _service_command(name: str, import_path: str, doc: str, *, database: bool = True):
    """``database`` False: the service runs with no database at all (a compute host: everything it
    reads and writes goes through the conductor)."""
    def command(config: Optional[Path] = ConfigOpt, state_dir: Optional[Path] = StateDirOpt,
                host: Optional[str] = typer.Option(None, "--host", help="This service's host name."),
                debug: bool = DebugOpt, log_format: Optional[str] = LogFormatOpt,
                log_file: Optional[str] = LogFileOpt) -> None:
        cfg = _config(config, state_dir, host=host, log_format=log_format, log_file=log_file)
        start_logging(cfg, debug)
        module_name, _, attr = import_path.partition(":")

        def build(rt):
            import importlib
            return [getattr(importlib.import_module(module_name), attr)(rt)]

        _run_components(cfg, build, database=database)

    command.__doc__ = doc
    app.command(name)(command)


_service_command("api", "nefos.control.compute.rest.service:component", "Run the Compute API.")
_service_command("conductor", "nefos.control.conductor.service:component", "Run the conductor.")
_service_command("scheduler", "nefos.control.scheduler.service:component", "Run the scheduler.")
_service_command("compute", "nefos.host.compute.service:component", "Run a compute host (--host NAME).",
                 database=False)
_service_command("network", "nefos.control.network.service:component", "Run the network service and its API.")
_service_command("l2-agent", "nefos.agents.l2_agent:component",
                 "Run a compute host's L2 agent (--host NAME: the compute host it serves).", database=False)
_service_command("dhcp-agent", "nefos.agents.dhcp_agent:component",
                 "Run a DHCP agent (dnsmasq per network, in its namespace on the network's bridge).", database=False)
_service_command("l3-agent", "nefos.agents.l3_agent:component",
                 "Run the L3 agent (routers and floating IPs in namespaces, on the Nefos external bridge).", database=False)
_service_command("image", "nefos.control.image.service:component", "Run the image service and its API.")
_service_command("metadata", "nefos.control.metadata.service:component",
                 "Run the metadata service (guests' metadata, behind a metadata proxy).")
_service_command("novncproxy", "nefos.control.console.service:component",
                 "Run the noVNC console proxy (browsers' websockets to guests' VNC servers).")
_service_command("identity", "nefos.control.identity.service:component", "Run the identity service and its API.")
_service_command("dashboard", "nefos.control.dashboard.service:component",
                 "Run the web console (signs users in with the identity service; reaches the cloud through its "
                 "APIs).", database=False)


@app.command("simulate-hosts")
def simulate_hosts(config: Optional[Path] = ConfigOpt, state_dir: Optional[Path] = StateDirOpt,
                   count: int = typer.Option(..., "--count", min=1, help="How many hosts."),
                   host_prefix: str = typer.Option("sim", "--host-prefix",
                                                   help="Hosts are named <prefix>-<n>."),
                   first: int = typer.Option(1, "--first", min=0, help="The first host's number."),
                   debug: bool = DebugOpt, log_format: Optional[str] = LogFormatOpt,
                   log_file: Optional[str] = LogFileOpt) -> None:
    """Run many simulated compute hosts (fake driver) in this process, for scale tests."""
    cfg = _config(config, state_dir, compute_driver="fake", log_format=log_format, log_file=log_file)
    start_logging(cfg, debug)

    def build(rt):
        from nefos.host.compute.simulator import component
        return [component(rt, host_prefix, count, first)]

    _run_components(cfg, build, database=False)


@db_app.command("upgrade")
def db_upgrade(config: Optional[Path] = ConfigOpt, state_dir: Optional[Path] = StateDirOpt,
               revision: str = typer.Argument("head")) -> None:
    """Apply the schema migrations."""
    cfg = _config(config, state_dir)

    async def run():
        from nefos import fileperms
        from nefos.db import sqlite_owner
        from nefos.db.migrate import upgrade
        from nefos.db.session import Database
        fileperms.passable_dir(cfg.state_dir)
        lock = None
        if not cfg.database_url:
            lock = sqlite_owner.acquire(cfg.state_dir)
            fileperms.private_file(cfg.sqlite_path)
        db = Database(cfg.effective_database_url)
        try:
            await upgrade(db, revision)
        finally:
            await db.dispose()
            if lock is not None:
                sqlite_owner.release(lock)

    try:
        asyncio.run(run())
    except ConfigError as exc:
        console.print(f"[bold red]nefos: {exc}[/bold red]", highlight=False)
        raise typer.Exit(2)
    console.print(f"database at {revision}: {cfg.effective_database_url}")


@db_app.command("connection-budget")
def db_connection_budget(processes: int = typer.Option(..., "--processes", min=1,
                                                       help="Nefos processes using the database."),
                         max_connections: int = typer.Option(100, "--max-connections",
                                                             help="The database server's limit.")) -> None:
    """The pool sizes each process may use (max_pool_size, max_overflow) for a deployment."""
    from nefos.db.connection_budget import deployment_budget
    try:
        budget = deployment_budget(max_connections, processes)
    except ValueError as exc:
        console.print(f"[bold red]nefos: {exc}[/bold red]", highlight=False)
        raise typer.Exit(2)
    console.print(f"max_pool_size = {budget['max_pool_size']}\nmax_overflow = {budget['max_overflow']}\n"
                  f"# {processes} processes x {budget['max_pool_size']} = {budget['budget']} of "
                  f"{budget['available']} connections available", markup=False, highlight=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
