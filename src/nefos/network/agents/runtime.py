"""What an agent process has: its configuration and the bus, no database (an agent's every
question goes to the network service over the bus, as Neutron's agents hold no database
credentials). ``nefos l2-agent`` / ``dhcp-agent`` / ``l3-agent`` run on it; ``nefos up`` gives
its agents the full runtime, of which they use the same two things."""

from __future__ import annotations

from nefos import fileperms
from nefos.bus import Bus, create_bus
from nefos.config import Config


class AgentRuntime:
    db = None  # (no database: an agent that reached for one would fail at once)

    def __init__(self, cfg: Config, bus: Bus):
        self.cfg = cfg
        self.bus = bus

    @classmethod
    async def open(cls, cfg: Config) -> "AgentRuntime":
        fileperms.passable_dir(cfg.state_dir)
        bus = create_bus(cfg.bus_url, cfg.control_exchange)
        bus.default_timeout = cfg.rpc_response_timeout
        await bus.start()
        return cls(cfg, bus)

    async def close(self) -> None:
        await self.bus.stop()
