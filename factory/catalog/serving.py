"""How the catalog's processes serve: the API server's port, health check, capabilities, secrets and volumes
(vLLM), the P/D and KV routers' own facts (vllm-router), and the Mooncake master's and store service's."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Literal

from pydantic import Field

from factory.base.models import Count, Port, Strict


class PodRequests(Strict):
    """What a pod asks its node for besides GPUs, so it is scheduled with room and is not the first evicted
    under pressure (a pod with no requests is BestEffort). The renderer adds one CPU per GPU the process
    drives (vLLM runs a worker process per GPU) and the /dev/shm size (a memory-backed emptyDir counts as
    the pod's memory). Its limits equal its requests (memory always; CPU unless `cpu_limit` is false)."""

    cpu: Count  # besides one per GPU: vLLM's API server and engine core
    memory_gib: Count  # besides /dev/shm
    why: str = ""
    # A CPU limit throttles the process (the kernel's CFS quota) once it uses its share: false where that
    # stalls the GPUs it feeds, with why (kube-score is told to ignore the missing limit on those pods).
    cpu_limit: bool = True
    why_no_cpu_limit: str = ""


class ImageUser(Strict):
    """The one non-root user every image runs its processes as: the same ids in every image (an OCI label
    says them), above 10000 as cluster linters ask, so that a host's or a node's own users are never it."""

    name: str = "vllm"
    uid: int = Field(10001, strict=True, gt=10000, lt=2**31)
    gid: int = Field(10001, strict=True, gt=10000, lt=2**31)
    home: str = "/home/vllm"
    # Where each cache the processes write goes (the image's ENV): HOME's, so one writable folder holds them.
    cache_env: dict[str, str] = {}

    @property
    def ids(self) -> str:
        return f"{self.uid}:{self.gid}"

    @property
    def owned(self) -> list[str]:
        """The folders the image makes for it: every cache folder its settings name (FlashInfer's base is
        HOME), so that each exists, owned by it, before anything is mounted there."""
        return sorted({self.home, *(v for v in self.cache_env.values() if v != self.home)})


class Writable(Strict):
    """A folder a process writes besides the model cache and /dev/shm: the root filesystem is read-only, so
    each is a volume of its own (a tmpfs in compose, a sized emptyDir in a pod)."""

    name: str
    target: str
    what: str
    size_gib: Count  # the catalog's default: a floor for what it holds, the vendor's may differ
    exec: bool = False  # it holds code that is loaded (compiled kernels): mounted without noexec


class Liveness(Strict):
    """When a pod's server is restarted: it must go unready (readiness: the health check's interval and
    retries) long before, so that a busy server sheds traffic and is not killed for being slow."""

    interval_s: Count
    timeout_s: Count
    failures: Count


class Secret(Strict):
    """An environment variable a process reads from a secret the operator holds: only its name is written."""

    env: str
    what: str
    optional: bool = True


class Volume(Strict):
    """A host folder (a setting, with its default) mounted into every serving container."""

    name: str
    target: str
    setting: str  # the host setting naming the folder
    default: str  # the folder when the setting is not given
    what: str


class Server(Strict):
    """How every image serves: the API port inside the container, the health check, and what every serving
    process gets besides its vendor's devices."""

    port: Port = 8000
    health_path: str = "/health"
    health_interval_s: Count = 30
    health_timeout_s: Count = 5
    health_retries: Count = 3
    liveness: Liveness = Liveness(interval_s=60, timeout_s=15, failures=5)
    capabilities: list[str] = []
    ulimits: dict[str, int] = {}
    secrets: list[Secret] = []
    volumes: list[Volume] = []
    user: ImageUser = ImageUser()
    writable: list[Writable] = []
    # The model cache's size where neither the recipe (its checkpoint) nor the tree (a model it ships) says.
    model_cache_default_gb: float = 100
    # Disk a pod writes besides its volumes: the container's logs, which the kubelet counts to its
    # ephemeral storage (the root filesystem is read-only).
    log_room_gib: Count = 1
    # What the engine does when a process exits: "no" leaves it exited, its logs saying why.
    restart: Literal["no", "on-failure", "always", "unless-stopped"] = "no"
    # The host address the API is published on by default (the BIND_ADDRESS setting changes it).
    publish_address: IPv4Address = IPv4Address("127.0.0.1")
    router_requests: PodRequests | None = None  # the P/D router's pod (no GPU, no model)

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.health_path}"


class RouterProcess(Strict):
    """The P/D router's own facts (vllm-router, the release the router lock holds): where it listens when no
    --port is given, how it says it is ready, and how long its own start takes. It binds only once every
    worker it fronts answers, waiting at most --worker-startup-timeout-secs (then it exits): its start budget
    is that wait plus its own start."""

    default_port: Port = 30000  # vllm-router 0.1.17's --port default (router_args.py): the image's EXPOSE
    health_path: str = "/health"
    start_period_s: Count = 60  # its own start once its workers answer
    worker_wait_default_s: Count = 600  # --worker-startup-timeout-secs' default in vllm-router 0.1.17
    sources: list[str] = []


class MooncakeProcess(Strict):
    """A Mooncake process of a KV-store deployment: where it says it is ready, within how long, and what a
    pod of it asks its node for."""

    port: Port
    health_path: str
    start_period_s: Count
    # Docker runs a container's first check one interval after it starts: these answer within seconds.
    health_interval_s: Count = 5
    # Where the other processes call it, besides the port it answers its health check on (the master's RPC,
    # where every instance and the store register): the default when its command names none.
    rpc_port: Port | None = None
    requests: PodRequests | None = None


class MooncakeProcesses(Strict):
    """The master and the store service, as Mooncake's own code runs them (read in the wheel, run here)."""

    master: MooncakeProcess = MooncakeProcess(
        port=9003, health_path="/health", start_period_s=60, rpc_port=50051
    )
    store: MooncakeProcess = MooncakeProcess(
        port=8080, health_path="/api/exist/healthcheck", start_period_s=150
    )
    config_dir: str = "/etc/mooncake"  # where a process's generated config template is mounted
    filled_dir: str = "/run/mooncake"  # where it is written, filled from the process's environment
    # The master's client lease (-client_ttl, seconds): a client silent this long is dropped with its
    # segment and the blocks in it. While a dead client's segment is listed, an instance that finds a block
    # there retries the lookup until the master drops it (vLLM 0.32.0): the lease bounds that wait.
    client_ttl_s: Count = 10
    # What an instance does with a request whose listed blocks cannot be read (vLLM's
    # kv_load_failure_policy): `recompute` them rather than `fail` the request, the default since vLLM pull
    # request 34896 (0.32.0's config/kv_transfer.py: "fail").
    load_failure_policy: Literal["recompute", "fail"] = "recompute"
    sources: list[str] = []
