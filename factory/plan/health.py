"""The programs a deployment's processes run, and how each says it is ready: the port it listens on and its
health check, from its command and the catalog's facts of its program."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from factory.catalog.schema import MooncakeProcesses, RouterProcess, Server
from factory.plan.settings import known_setting
from factory.synthesis.options import ServeOptions, Value


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# The programs a deployment's processes run.
Program = Literal["vllm", "vllm-router", "mooncake-master", "mooncake-store"]


class HealthProbe(Frozen):
    """How the process says it is ready: an HTTP GET every interval once the start period allows."""

    path: str
    port: int
    host: Value  # where to ask: the address the process listens on
    port_setting: str | None = None  # the port is this setting's value (`port` its default): the PD router's
    start_period_s: int
    interval_s: int
    timeout_s: int
    retries: int

    def url(self, host: str) -> str:
        port = f"${self.port_setting}" if self.port_setting else self.port
        return f"http://{host}:{port}{self.path}"

    def command(self, host: str) -> list[str]:
        """The check Docker runs inside the container (the image's own HEALTHCHECK runs the same)."""
        return ["curl", "-fsS", "-o", "/dev/null", self.url(host)]

    @property
    def check(self) -> list[str]:
        """The check at the address the process listens on (a node's probe, not a template's)."""
        if not isinstance(self.host, str):
            raise ValueError(f"a template's probe ({self.host}) has no single address: take one node's")
        return self.command(self.host)


class Programs(Frozen):
    """What the catalog says of each program a process runs: its default port, where it says it is ready,
    its own start."""

    server: Server  # vLLM's
    router: RouterProcess
    mooncake: MooncakeProcesses = MooncakeProcesses()

    def default_port(self, program: Program) -> int:
        return {
            "vllm": self.server.port,
            "vllm-router": self.router.default_port,
            "mooncake-master": self.mooncake.master.port,
            "mooncake-store": self.mooncake.store.port,
        }[program]


def listening_port(programs: Programs, program: Program, options: ServeOptions) -> tuple[int, str | None]:
    """The port a process listens on, and the setting that holds it: its --port; `--port $ROUTER_PORT`, that
    setting's default (the setting may move it); else its program's default (vLLM's, vllm-router's, the
    Mooncake master's admin port, the store service's REST port)."""
    if program.startswith("mooncake-"):  # their flags name other ports (-rpc_port): their own defaults
        return programs.default_port(program), None
    known = known_setting(options.port_setting) if options.port_setting else None
    setting = options.port_setting if known else None
    default = known.default if known else None
    found = options.port or (int(default) if default and default.isdigit() else None)
    return found or programs.default_port(program), setting


def health_probe(
    programs: Programs, program: Program, options: ServeOptions, start_period_s: int
) -> HealthProbe | None:
    """How a process says it is ready, from what its command says and the program's own facts: asked on the
    port and address it listens on, within its own start budget: vLLM's is the model's (`start_period_s`),
    the router's its wait for its workers (--worker-startup-timeout-secs, else its default) plus its own
    start, a Mooncake process's its own (the catalog's). None for a headless rank (it serves no API)."""
    if options.headless:
        return None
    server, router = programs.server, programs.router
    port, setting = listening_port(programs, program, options)
    wait = options.worker_wait_s if options.worker_wait_s is not None else router.worker_wait_default_s
    master, store = programs.mooncake.master, programs.mooncake.store
    path, start, interval = {
        "vllm": (server.health_path, start_period_s, server.health_interval_s),
        "vllm-router": (router.health_path, router.start_period_s + wait, server.health_interval_s),
        "mooncake-master": (master.health_path, master.start_period_s, master.health_interval_s),
        "mooncake-store": (store.health_path, store.start_period_s, store.health_interval_s),
    }[program]
    return HealthProbe(
        path=path,
        port=port,
        host=options.host if options.host is not None else "127.0.0.1",
        start_period_s=start,
        interval_s=interval,
        timeout_s=server.health_timeout_s,
        retries=server.health_retries,
        port_setting=setting,
    )
