"""Offline checks of the Kubernetes manifests, as an API server with LWS installed would apply them.

No API server runs on these machines, so each check is the part of admission it stands for: the LWS CRD of
each release (its OpenAPI schema, closed as the API server prunes and `kubectl --validate=strict` refuses
unknown fields), the LWS webhook's rules the schema cannot hold (ported from leaderworkerset_webhook.go),
the core kinds against Kubernetes' own schemas (kubernetes-validate, strict), and LWS's pod webhook, which
owns every LWS_* variable. Then how a kubelet expands a container's $(VAR)s, for comparing commands.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

LWS_DATA = Path(__file__).resolve().parent / "data" / "lws"
LWS_RELEASES = ("v0.7.0", "v0.8.0", "v0.9.0", "v0.10.0")  # oldest first; the manifests claim the first
KUBERNETES_VERSIONS = tuple(f"1.{minor}.0" for minor in range(30, 38))  # appArmorProfile is 1.30's
INT32_MAX = 2**31 - 1


# --- the CRD's schema, as the API server applies it ---------------------------------------------------


def _closed(node: Any) -> Any:
    """A structural schema as JSON Schema: int-or-string as anyOf, every object with properties closed
    unless it preserves unknown fields, the Kubernetes extensions dropped."""
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        # a field named like a keyword (`type`, `items`) stays a field: properties map names to schemas
        key: {name: _closed(field) for name, field in value.items()}
        if key == "properties"
        else _closed(value)
        for key, value in node.items()
        if not key.startswith("x-kubernetes-")
    }
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    preserves = node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in node and "additionalProperties" not in node and not preserves:
        out["additionalProperties"] = False
    return out


@cache
def lws_validator(release: str) -> jsonschema.protocols.Validator:
    text = (LWS_DATA / release / "leaderworkerset.x-k8s.io_leaderworkersets.yaml").read_text()
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = _closed(version["schema"]["openAPIV3Schema"])
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return validator_class(schema)


def schema_problems(lws: Mapping[str, Any], release: str) -> list[str]:
    """What the CRD of `release` refuses in the object, each with its path."""
    errors = lws_validator(release).iter_errors(dict(lws))
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in errors]


# --- the webhook's rules (leaderworkerset_webhook.go: Default, then generalValidate) -------------------

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
PERCENT = re.compile(r"^[0-9]+%$")


def _scaled(value: int | str, total: int, round_up: bool) -> int | None:
    if isinstance(value, int):
        return value
    if not PERCENT.match(value):
        return None
    share = int(value[:-1]) * total / 100
    return int(-(-share // 1)) if round_up else int(share)


def _int_or_percent(value: int | str, path: str) -> list[str]:
    if isinstance(value, int):
        return [f"{path}: must be greater than or equal to 0"] if value < 0 else []
    if not PERCENT.match(value):
        return [f"{path}: must be an integer or percentage (e.g '5%')"]
    return [f"{path}: must not be greater than 100%"] if int(value[:-1]) > 100 else []


def webhook_problems(lws: Mapping[str, Any]) -> list[str]:
    """What LWS's admission webhook refuses, after its defaults (replicas 1, maxUnavailable 1, maxSurge 0)."""
    problems: list[str] = []
    name = lws.get("metadata", {}).get("name", "")
    if not DNS1035.match(name) or len(name) > 63:
        problems.append(f"metadata.name: {name!r} is not a DNS-1035 label (it names the headless Service)")
    spec = lws["spec"]
    replicas = spec.get("replicas", 1)
    template = spec["leaderWorkerTemplate"]
    size = template.get("size", 1)
    if replicas < 0 or replicas > 1_000_000:
        problems.append("spec.replicas: must be between 0 and 1000000")
    if size < 1:
        problems.append("spec.leaderWorkerTemplate.size: size must be equal or greater than 1")
    if replicas * size > INT32_MAX:
        problems.append(
            f"spec.replicas: the product of replicas and worker replicas must not exceed {INT32_MAX}"
        )
    rolling = spec.get("rolloutStrategy", {}).get("rollingUpdateConfiguration", {})
    unavailable, surge = rolling.get("maxUnavailable", 1), rolling.get("maxSurge", 0)
    path = "spec.rolloutStrategy.rollingUpdateConfiguration"
    problems += _int_or_percent(unavailable, f"{path}.maxUnavailable")
    problems += _int_or_percent(surge, f"{path}.maxSurge")
    if rolling.get("partition", 0) < 0:
        problems.append(f"{path}.partition: must be greater than or equal to 0")
    if _scaled(unavailable, replicas, False) == 0 and _scaled(surge, replicas, True) == 0 and replicas:
        problems.append(f"{path}.maxUnavailable: must not be 0 when `maxSurge` is 0")
    policy = template.get("subGroupPolicy")
    exclusive = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
    if policy is None:
        if exclusive in lws.get("metadata", {}).get("annotations", {}):
            problems.append(f"metadata.annotations.{exclusive}: cannot be set without subGroupSize")
        return problems
    group = policy.get("subGroupSize", 1)
    where = "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize"
    if group < 1:
        return [*problems, f"{where}: subGroupSize must be equal or greater than 1"]
    if size % group and (size - 1) % group:
        problems.append(f"{where}: size or size - 1 must be divisible by subGroupSize")
    if size < group:
        problems.append(f"{where}: subGroupSize cannot be larger than size")
    if policy.get("type") == "LeaderExcluded" and (size - 1) % group:
        problems.append(f"{where}: size-1 must be divisible by subGroupSize when using LeaderExcluded")
    return problems


# What a vLLM group needs of LWS that its admission allows otherwise.
HEAD_FLAGS = ("--master-addr", "--data-parallel-address")  # where a rank finds its group's first node
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"


def group_problems(lws: Mapping[str, Any]) -> list[str]:
    """A vLLM group deadlocks under `startupPolicy: LeaderReady` (LWS makes the workers once the leader is
    Ready; vLLM's leader is Ready once its workers have joined), and a worker whose head address is anything
    but the leader's waits for a head that is not there (its own pod, loopback, a fixed IP)."""
    problems: list[str] = []
    name = lws["metadata"]["name"]
    policy = lws["spec"].get("startupPolicy", "LeaderCreated")
    if policy != "LeaderCreated":
        problems.append(f"{name}: startupPolicy {policy}: the leader is never Ready before its workers start")
    for role, template in pod_templates(lws):
        if role != "worker":
            continue
        for container in template["spec"]["containers"]:
            for flag, value in itertools.pairwise(container.get("args", [])):
                if flag in HEAD_FLAGS and value != LEADER_ADDRESS:
                    problems.append(f"{name} worker: {flag} {value}, not the leader's {LEADER_ADDRESS}")
    return problems


# --- core objects and the pod webhook's variables -------------------------------------------------------


def pod_templates(obj: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(role, pod template) of a Deployment (node) or an LWS (leader, worker)."""
    if obj["kind"] == "Deployment":
        yield "node", obj["spec"]["template"]
    elif obj["kind"] == "LeaderWorkerSet":
        template = obj["spec"]["leaderWorkerTemplate"]
        # without a leaderTemplate the leader runs the workerTemplate (the only pod of a size-1 group)
        yield "leader", template.get("leaderTemplate", template["workerTemplate"])
        if "leaderTemplate" in template and template["size"] > 1:
            yield "worker", template["workerTemplate"]


def core_problems(obj: Mapping[str, Any], version: str) -> list[str]:
    """Kubernetes' own schema of `version`, strictly: a core object as it is, an LWS's pod templates as the
    PodTemplates the LWS controller makes of them."""
    if obj["kind"] == "LeaderWorkerSet":
        checked = [
            {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role}, "template": template}
            for role, template in pod_templates(obj)
        ]
    else:
        checked = [dict(obj)]
    problems: list[str] = []
    for one in checked:
        validator = core_validator(version, one["kind"], one["apiVersion"])
        problems += [
            f"{one['kind']} {one['metadata']['name']}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(one)
        ]
    return problems


@cache
def core_validator(version: str, kind: str, api_version: str) -> jsonschema.protocols.Validator:
    """kubernetes-validate's strict schema of the kind, loaded once (its validate() reads the files again
    for every object: 36 s for the project's manifests, against under a second)."""
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = schema_contents(f"{folder}/{kind.lower()}-{group}.json", version)
    definitions = schema_contents(f"{folder}/_definitions.json", version)
    registry: Registry[Any] = Resource.from_contents(definitions) @ (
        Resource.from_contents(schema) @ Registry()
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def lws_variables_set(obj: Mapping[str, Any]) -> list[str]:
    """LWS_* variables a manifest sets itself: LWS's pod webhook owns them (a manifest value would differ
    from the group's real leader, index or size)."""
    found = []
    for role, template in pod_templates(obj):
        for container in template["spec"]["containers"]:
            found += [
                f"{role}: {e['name']}" for e in container.get("env", []) if e["name"].startswith("LWS_")
            ]
    return found


def secrets_as_values(obj: Mapping[str, Any], secret_names: set[str]) -> list[str]:
    """A secret's variable given a plain value, not a secretKeyRef."""
    return [
        f"{role}: {e['name']}"
        for role, template in pod_templates(obj)
        for container in template["spec"]["containers"]
        for e in container.get("env", [])
        if e["name"] in secret_names and "secretKeyRef" not in e.get("valueFrom", {})
    ]


# --- how the kubelet expands $(VAR) (kubernetes third_party/forked/golang/expansion) -------------------


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """$(NAME) becomes its value when NAME is defined, else stays as written; $$ becomes $."""
    out: list[str] = []
    cursor = checkpoint = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1 :]
            if rest[0] == "$":
                out.append("$")
                advance = 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    out.append("$(")
                    advance = 1
                else:
                    name = rest[1:close]
                    found = lookup(name)
                    out.append(found if found is not None else f"$({name})")
                    advance = close + 1
            else:
                out.append("$" + rest[0])
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def container_environment(
    container: Mapping[str, Any],
    injected: Mapping[str, str],
    fields: Mapping[str, str],
    sources: Mapping[str, Mapping[str, str]],
) -> dict[str, str]:
    """The environment the kubelet gives the container: `injected` (LWS's webhook puts it first), then each
    entry in order, a value expanded from the entries before it. `fields` are the downward API's values
    (status.podIP), `sources` each ConfigMap's and Secret's data by name; an optional reference to a
    missing key is left out."""
    env = dict(injected)
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = expand(entry["value"], env.get)
            continue
        source = entry["valueFrom"]
        if "fieldRef" in source:
            env[entry["name"]] = fields[source["fieldRef"]["fieldPath"]]
            continue
        ref = source.get("configMapKeyRef") or source["secretKeyRef"]
        value = sources.get(ref["name"], {}).get(ref["key"])
        if value is None:
            if not ref.get("optional"):
                raise KeyError(f"{ref['name']}/{ref['key']} is not there and not optional")
            continue
        env[entry["name"]] = value
    return env


# --- addresses: each process binds its pod's address, the PD router reaches pools by stable names ------

ROUTER_POOL_FLAGS = ("--prefill", "--decode")
ROUTER_WORKERS_FLAG = "--worker-urls"  # the KV router's instances, one URL per word up to the next flag
BOUND_VARIABLES = ("VLLM_NIXL_SIDE_CHANNEL_HOST",)
WILDCARDS = {"0.0.0.0", "::"}  # every interface of the pod: its address among them (a recipe's own --host)
URL_HOST = re.compile(r"^https?://(?P<host>[^:/]+)(?::\d+)?/?$")


def _pod_address_vars(container: Mapping[str, Any]) -> set[str]:
    return {
        e["name"]
        for e in container.get("env", [])
        if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP"
    }


def address_problems(objects: list[Mapping[str, Any]]) -> list[str]:
    """What would not reach, or not be reached: a process that binds (--host, NIXL's side channel) other than
    its pod's address from the downward API (loopback serves no other pod, a fixed IP is another pod's; a
    --host of every interface includes it, an advertised side-channel host must be it); a PD
    router pointed at anything but a stable DNS name an LWS of the manifest gives one of its pods
    (`<lws>-0` its leader, `<lws>-0-<i>` its other nodes, under its headless Service `<lws>`); a KV router
    pointed at anything but a Service of the manifest, at one of its ports."""
    stable = set()
    for obj in objects:
        if obj["kind"] == "LeaderWorkerSet":
            name, size = obj["metadata"]["name"], obj["spec"]["leaderWorkerTemplate"]["size"]
            stable |= {f"{name}-0.{name}"} | {f"{name}-0-{i}.{name}" for i in range(1, size)}
    services = {
        f"{o['metadata']['name']}:{port['port']}" for o in objects if o["kind"] == "Service"
        for port in o["spec"]["ports"]
    }  # fmt: skip
    problems: list[str] = []
    for obj in objects:
        if obj["kind"] not in ("Deployment", "LeaderWorkerSet"):
            continue
        for role, template in pod_templates(obj):
            where = f"{obj['metadata']['name']} {role}"
            for container in template["spec"]["containers"]:
                own = {f"$({var})" for var in _pod_address_vars(container)}
                args = container.get("args", [])
                for flag, value in itertools.pairwise(args):
                    if flag == "--host" and value not in own | WILDCARDS:
                        problems.append(f"{where}: binds {value}, not its pod's address (status.podIP)")
                    if flag in ROUTER_POOL_FLAGS:
                        match = URL_HOST.match(value)
                        if match is None or match["host"] not in stable:
                            problems.append(f"{where}: {flag} {value} is not a stable name of a pool's pod")
                problems += _worker_url_problems(where, args, services)
                for e in container.get("env", []):
                    if e["name"] in BOUND_VARIABLES and e.get("value") not in own:
                        problems.append(f"{where}: {e['name']} is not its pod's address (status.podIP)")
    return problems


def _worker_url_problems(where: str, args: list[str], services: set[str]) -> list[str]:
    """A KV router's --worker-urls: each a Service of the manifest at one of its ports, never a pod's IP."""
    if ROUTER_WORKERS_FLAG not in args:
        return []
    urls = list(
        itertools.takewhile(lambda arg: not arg.startswith("-"), args[args.index(ROUTER_WORKERS_FLAG) + 1 :])
    )
    return [
        f"{where}: {ROUTER_WORKERS_FLAG} {url} is not a Service of the manifest at one of its ports"
        for url in urls
        if url.removeprefix("http://").rstrip("/") not in services
    ]
