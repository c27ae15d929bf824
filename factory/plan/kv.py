"""Plan a Mooncake KV-store deployment (kv_store/*.yaml): the site's commands (factory.synthesis.kv_store) as
the factory's processes, each changed by the catalog's rules with every change recorded.

The processes, in the order they start: the master; in the centralized topology the store service; each
vLLM instance (its head, then its other ranks); with two instances or more the router. Each Mooncake
process reads a config the factory generates from the kv_store file (the vendor's values from the catalog in
place of the file's where the catalog gives them): a template whose $SETTINGS are filled from the process's
environment when it starts (`factory-fill-config` in the image), so a setting changes it, never a hand edit.

What differs from the site, and why, is recorded as deviations: where a config is read and written (the site
leaves MOONCAKE_CONFIG_PATH to the user), the store's local_hostname (the store service refuses a config
without one), the settings each process's config names in its environment, an instance listening on its
own address on the host's network (the router calls it there) and naming its Mooncake segment after that
address (VLLM_HOST_IP), the master's client lease and the instances' load-failure policy (kv_failover: so
that the deployment outlives one of its processes), and the catalog's router rules.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass

from factory.base.errors import InputError
from factory.catalog.schema import Mooncake
from factory.plan import kv_failover
from factory.plan.commands import Finisher, env_text
from factory.plan.deployment import ConfigEdit, Deviation, EnvEdit, FlagEdit, NodeRole, node_role
from factory.plan.runspec import FILL, ConfigMount, Launch
from factory.plan.settings import placeholder_names
from factory.project import Project
from factory.recipes.kv_checks import HELD, SIZE_RULE, master_words, shell_words, size_bytes
from factory.recipes.loader import LoadedRecipe
from factory.recipes.tree_schema import ConfigValue
from factory.synthesis.command import Command, Process
from factory.synthesis.kv_store import KvCommand, instance_setting

STORE_HOST = "$MOONCAKE_STORE_IP"  # the store's local_hostname: the address instances reach it at
MASTER = "master"
STORE = "store"
INSTANCE = "instance-"  # an instance's pool: instance-1, instance-2, ...


def config_bytes(values: Mapping[str, ConfigValue], key: str, source: str) -> int:
    """A size in a Mooncake config, in bytes, as Mooncake reads it (the kv_store file's sizes were checked
    when the tree was read; the catalog's are checked here)."""
    value = values.get(key, HELD[key])
    try:
        return size_bytes(value)
    except ValueError as exc:
        raise InputError(
            f"not a size Mooncake can register: {exc}", file=source, field=key, value=value, valid=[SIZE_RULE]
        ) from None


def held_bytes(values: Mapping[str, ConfigValue], source: str) -> int:
    """The memory a Mooncake client registers with this config: its segment and its buffer."""
    return sum(config_bytes(values, key, source) for key in HELD)


def instance_pool(number: int) -> str:
    """Instance `number`'s pool: its head and its other ranks."""
    return f"{INSTANCE}{number}"


def instance_number(pool: str) -> int:
    """The number of the instance whose pool this is (instance_pool's inverse)."""
    return int(pool.removeprefix(INSTANCE))


@dataclass(frozen=True)
class PlannedKv:
    """One KV-store deployment's processes, before the image they run in exists."""

    command: KvCommand
    roles: tuple[NodeRole, ...]
    deviations: tuple[Deviation, ...]


def config_text(values: Mapping[str, ConfigValue], source: str) -> str:
    """A generated config: JSON, its $SETTINGS left for the launcher to fill. JSON has no comments: the
    do-not-edit line is a key of its own, which Mooncake's and vLLM's loaders skip (they read the keys they
    know)."""
    note = f"DO NOT EDIT: written by `factory generate` from {source}; its settings are filled at start"
    return json.dumps({"comment": note, **values}, indent=1) + "\n"


def with_vendor(
    template: Mapping[str, ConfigValue], given: Mapping[str, ConfigValue]
) -> dict[str, ConfigValue]:
    """The file's config with the vendor's values in place (global_segment_size only where the file's is a
    size: an instance of the centralized topology gives 0, the store owning the pool)."""
    found = dict(template)
    for key, value in given.items():
        if key == "global_segment_size" and found.get(key) in (0, "0"):
            continue
        found[key] = value
    return found


class _KvPlanner:
    def __init__(
        self, project: Project, loaded: LoadedRecipe, kv: KvCommand, version: str | None, weights: str
    ) -> None:
        self.kv = kv
        self.mooncake = project.catalog.mooncake
        self.source = f"{project.relative(loaded.path)}, kv_store/{kv.store_id}.yaml and the catalog"
        self.finisher = Finisher(
            project,
            loaded,
            version,
            weights,
            Command("kv_store_lb", kv.model, kv.node_count, kv.instances[0].nodes),
        )

    def record(self, flag: str, reason: str, edits: list[FlagEdit | EnvEdit | ConfigEdit]) -> None:
        if edits:
            self.finisher.record(Deviation(flag=flag, reason=reason, edits=edits))

    def mount(self, name: str, values: Mapping[str, ConfigValue]) -> ConfigMount:
        return ConfigMount(
            file=f"mooncake-{name}.json",
            template=f"{self.mooncake.config_dir}/{name}.json",
            filled=f"{self.mooncake.filled_dir}/{name}.json",
            content=config_text(values, self.source),
        )

    def filled_env(self, config: ConfigMount, path: str) -> dict[str, str]:
        """The settings a config names, each in the process's environment (where the launcher reads it)."""
        names = placeholder_names([config.content])
        self.record(
            "(settings a Mooncake config names)",
            "the config is filled when the process starts, from its environment: each setting it names is "
            "given to the process (the site fills it by hand in a shell heredoc)",
            [EnvEdit(process=path, env=name, before=None, after=f"${name}") for name in names],
        )
        return {name: f"${name}" for name in names}

    def master(self) -> NodeRole:
        words = master_words(self.kv.master)
        args, lease = kv_failover.with_lease(words[1:], self.mooncake.client_ttl_s, "master_argv")
        self.record(kv_failover.LEASE_FLAG, kv_failover.LEASE_REASON, [lease] if lease else [])
        launch = Launch(entrypoint=tuple(words[:1]))
        return node_role(MASTER, 0, args, {}, program="mooncake-master", launch=launch)

    def store(self, vendor: Mooncake) -> NodeRole | None:
        kv = self.kv
        if kv.store_command is None or kv.store_config is None:
            return None
        values = with_vendor(kv.store_config, vendor.store_config)
        if "local_hostname" not in values:
            values["local_hostname"] = STORE_HOST
            self.record(
                "local_hostname",
                'the store service refuses a config without local_hostname ("Missing required config '
                'field: local_hostname", run here): the address the instances reach the store at',
                [ConfigEdit(process="store.config", key="local_hostname", before=None, after=STORE_HOST)],
            )
        config = self.mount(STORE, values)
        words = shell_words(kv.store_command)
        program, args = words[:3], words[3:]
        found = [index for index, word in enumerate(args[:-1]) if word == "--config"]
        if found:
            site = args[found[-1] + 1]
            args[found[-1] + 1] = config.filled
            self.record(
                "--config",
                "the store's config is generated, and filled where the store service reads it",
                [
                    FlagEdit(
                        process="store_argv", before=["--config", site], after=["--config", config.filled]
                    )
                ],
            )
        launch = Launch(
            entrypoint=(FILL, config.template, config.filled, *program),
            configs=(config,),
            after=(MASTER,),
            holds_bytes=held_bytes(values, self.source),
        )
        env = self.filled_env(config, "store.env")
        return node_role(STORE, 0, args, env, program="mooncake-store", launch=launch)

    def instances(self, vendor: Mooncake, after: tuple[str, ...]) -> list[NodeRole]:
        kv = self.kv
        values = with_vendor(kv.vllm_config, vendor.config)
        config = self.mount("vllm", values)
        per_rank = held_bytes(values, self.source)
        many = len(kv.instances) > 1
        roles: list[NodeRole] = []
        for number, instance in enumerate(kv.instances, start=1):
            pool = instance_pool(number)
            for rank, process in enumerate(instance.nodes):
                name = pool if rank == 0 else f"{pool}-worker-{rank}"
                if number == 1 and rank == 0:
                    path, env_path = "vllm_argv", "env"
                elif number == 1:
                    path, env_path = f"vllm_worker_argvs[{rank - 1}]", f"vllm_worker_envs[{rank - 1}]"
                else:
                    path, env_path = f"instance_argvs[{number - 1}][{rank}]", f"instance_envs[{number - 1}]"
                # On the host's network an instance's API listens on its own address, which the router calls.
                own = f"${instance_setting(number)}" if many and rank == 0 else None
                bind = own or "$BIND_ADDRESS"
                process = self._failure_policy(process, path)
                role = self.finisher.role(name, rank, process, pool=pool, bind=bind, path=path)
                site_env = {key: env_text(value) for key, value in process.env.items()}
                env = {**role.env, **self._config_path(site_env, config, env_path)}
                env |= self.filled_env(config, env_path)
                if own is not None:
                    env |= self._segment_name(own, env_path)
                launch = Launch(
                    entrypoint=(FILL, config.template, config.filled, "factory-serve"),
                    configs=(config,),
                    after=after,
                    holds_per_rank_bytes=per_rank,
                )
                roles.append(role.model_copy(update={"env": env, "launch": launch}))
        return roles

    def _failure_policy(self, process: Process, path: str) -> Process:
        policy = self.mooncake.load_failure_policy
        args, edit = kv_failover.with_failure_policy(process.args, policy, path)
        self.record(kv_failover.TRANSFER_FLAG, kv_failover.POLICY_REASON, [edit] if edit else [])
        return dataclasses.replace(process, args=args)

    def _segment_name(self, own: str, path: str) -> dict[str, str]:
        """An instance's Mooncake client names its segment after its host's address (vLLM's get_ip()): two
        instances on one host named theirs alike, and neither could read the blocks the other held ("Failed
        to open segment", run here). Each names it after the address it listens on, as VLLM_HOST_IP (read by
        get_ip() in vLLM 0.32.0's store worker; older releases' store workers were not checked)."""
        self.record(
            "VLLM_HOST_IP",
            "an instance's segment is named after the address it listens on, so that instances sharing a "
            "host (each on an address of its own) are told apart by the pool",
            [EnvEdit(process=path, env="VLLM_HOST_IP", before=None, after=own)],
        )
        return {"VLLM_HOST_IP": own}

    def _config_path(self, env: dict[str, str], config: ConfigMount, path: str) -> dict[str, str]:
        site = env.get("MOONCAKE_CONFIG_PATH")
        if site == config.filled:
            return {}
        self.record(
            "MOONCAKE_CONFIG_PATH",
            "the instances' Mooncake config is generated, mounted, and filled where vLLM reads it (vLLM "
            "reads its Mooncake config from that file only)",
            [EnvEdit(process=path, env="MOONCAKE_CONFIG_PATH", before=site, after=config.filled)],
        )
        return {"MOONCAKE_CONFIG_PATH": config.filled}

    def router(self, after: tuple[str, ...]) -> NodeRole | None:
        if not self.kv.router:
            return None
        role = self.finisher.router_role(list(self.kv.router[1:]), path="router_argv")
        return role.model_copy(update={"launch": Launch(after=after)})


def plan_kv(
    project: Project, loaded: LoadedRecipe, kv: KvCommand, version: str | None, weights: str, vendor: Mooncake
) -> PlannedKv:
    """The processes of one KV-store deployment, in the order they start, with what the factory changed."""
    planner = _KvPlanner(project, loaded, kv, version, weights)
    master = planner.master()
    store = planner.store(vendor)
    meets = (MASTER,) if store is None else (MASTER, STORE)
    instances = planner.instances(vendor, meets)
    router = planner.router(tuple(role.name for role in instances if role.rank == 0))
    roles = [master, *([store] if store else []), *instances, *([router] if router else [])]
    return PlannedKv(kv, tuple(roles), tuple(planner.finisher.deviations.values()))
