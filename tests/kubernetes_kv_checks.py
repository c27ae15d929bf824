"""Offline checks of a KV-store deployment's manifests, of what neither a schema nor a control plane with kwok
shows (kwok marks every init container Completed at once, and runs no process):

- the start order: each pod's init containers, expanded as the kubelet expands them and run by the real
  shell with a stand-in `curl` that refuses each URL a few times before it answers, must keep polling until
  the Service of every process its process starts after answers that process's own health check;
- the Mooncake addresses: each config, filled from the pod's environment by the image's own launcher
  (factory/image_files/factory-fill-config, run here), must name the master by a Service of the manifest that
  forwards the port it names to the master, and advertise the store's own address as its pod's (the store
  advertises local_hostname with ports it picks at random, which no Service forwards).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests import kubernetes_checks as checks
from tests.conftest import ROOT

FILL = ROOT / "factory" / "image_files" / "factory-fill-config"
REFUSALS = 2  # how often the stand-in curl refuses each URL before it answers
POD_IP = "10.0.0.42"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def workloads(objects: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet")}


def pods(obj: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
    """(role, pod template, the labels its pods carry: LWS adds its name and each pod's index)."""
    for role, template in checks.pod_templates(obj):
        labels = dict(template["metadata"]["labels"])
        if obj["kind"] == "LeaderWorkerSet":
            labels |= {LWS_NAME: obj["metadata"]["name"], LWS_INDEX: "0" if role == "leader" else "1"}
        yield role, template, labels


def _selected(service: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    return service["spec"]["selector"].items() <= labels.items()


def forwards(objects: Sequence[Mapping[str, Any]], host: str, port: int) -> bool:
    """Whether `host` is a Service of the manifest whose `port` reaches a container port of a pod it
    selects."""
    for service in (o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == host):
        targets = {p["targetPort"] for p in service["spec"]["ports"] if p["port"] == port}
        for obj in workloads(objects).values():
            for _, template, labels in pods(obj):
                listening = {
                    value
                    for c in template["spec"]["containers"]
                    for p in c.get("ports", [])
                    for value in (p["name"], p["containerPort"])
                }
                if _selected(service, labels) and targets & listening:
                    return True
    return False


def answering(objects: Sequence[Mapping[str, Any]], workload: str) -> set[str]:
    """The URLs at which the workload's serving pod answers its readiness probe, through a Service."""
    found: set[str] = set()
    services = [o for o in objects if o["kind"] == "Service"]
    for role, template, labels in pods(workloads(objects)[workload]):
        if role == "worker":
            continue
        container = template["spec"]["containers"][0]
        probe = container.get("readinessProbe", {}).get("httpGet")
        if probe is None:
            continue
        named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        target = {probe["port"], named.get(probe["port"])}
        for service in (s for s in services if _selected(s, labels)):
            found |= {
                f"http://{service['metadata']['name']}:{p['port']}{probe['path']}"
                for p in service["spec"]["ports"]
                if p["targetPort"] in target
            }
    return found


def _stand_ins(folder: Path) -> Path:
    """A `curl` that refuses each URL REFUSALS times, then answers (counting calls per URL), and a `sleep`
    that returns at once."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    curl = bin_dir / "curl"
    curl.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        f"log = pathlib.Path({str(folder / 'calls.json')!r})\n"
        "calls = json.loads(log.read_text()) if log.exists() else {}\n"
        "url = sys.argv[-1]\n"
        "calls[url] = calls.get(url, 0) + 1\n"
        "log.write_text(json.dumps(calls))\n"
        f"sys.exit(7 if calls[url] <= {REFUSALS} else 0)\n"
    )
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir


def run_waits(template: Mapping[str, Any], folder: Path) -> tuple[dict[str, int], list[str]]:
    """Each init container of the pod, run as the kubelet runs it: (calls per URL, what went wrong)."""
    folder.mkdir(parents=True, exist_ok=True)
    bin_dir = _stand_ins(folder)
    problems: list[str] = []
    for init in template["spec"].get("initContainers", []):
        env = checks.container_environment(init, {}, {"status.podIP": POD_IP}, {})
        argv = [checks.expand(word, env.get) for word in [*init.get("command", []), *init.get("args", [])]]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=30,
                env={**env, "PATH": f"{bin_dir}:/usr/bin:/bin"},
            )
        except subprocess.TimeoutExpired:
            problems.append(f"{init['name']} never finished though every URL answered")
            continue
        if done.returncode != 0:
            problems.append(f"{init['name']} exited {done.returncode}: {done.stderr[-300:]}")
    log = folder / "calls.json"
    return (json.loads(log.read_text()) if log.exists() else {}), problems


def start_order_problems(
    objects: Sequence[Mapping[str, Any]], order: Mapping[str, Sequence[str]], folder: Path
) -> list[str]:
    """For each workload, the workloads it must start after (`order`): every pod of it waits, in its init
    containers, until each of those answers its health check through its Service, polling past refusals."""
    problems: list[str] = []
    found = workloads(objects)
    for name, awaited in order.items():
        for n, (role, template, _) in enumerate(pods(found[name])):
            calls, failed = run_waits(template, folder / f"{name}-{n}")
            problems += [f"{name} {role}: {problem}" for problem in failed]
            for other in awaited:
                urls = answering(objects, other)
                if not any(calls.get(url, 0) > REFUSALS for url in urls):
                    problems.append(
                        f"{name} {role}: starts before {other} answers (waits for none of {sorted(urls)}; "
                        f"asked {sorted(calls)})"
                    )
    return problems


def _configs(objects: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    return {o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"}


def filled_configs(
    objects: Sequence[Mapping[str, Any]], folder: Path
) -> Iterator[tuple[str, dict[str, Any], dict[str, Any], list[str]]]:
    """(where, container, the config as its launcher fills it from the pod's environment, problems), for
    every container whose command fills a mounted config."""
    maps = _configs(objects)
    for name, obj in workloads(objects).items():
        for role, template, _ in pods(obj):
            volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
            container = template["spec"]["containers"][0]
            for mount in container.get("volumeMounts", []):
                source = volumes[mount["name"]].get("configMap")
                if source is None:
                    continue
                where = f"{name} {role}"
                command = container.get("command", [])
                problems = []
                if command[:2] != ["factory-fill-config", mount["mountPath"]]:
                    problems.append(f"{where}: {mount['mountPath']} is mounted but not the template filled")
                injected = {"LWS_LEADER_ADDRESS": f"{name}-0.{name}", "LWS_WORKER_INDEX": "1"}
                env = checks.container_environment(container, injected, {"status.podIP": POD_IP}, maps)
                template_file, filled = folder / f"{name}-{role}.in", folder / f"{name}-{role}.json"
                folder.mkdir(parents=True, exist_ok=True)
                template_file.write_text(maps[source["name"]][mount["subPath"]])
                subprocess.run(
                    [sys.executable, str(FILL), str(template_file), str(filled), "true"],
                    env={**env, "PATH": "/usr/bin:/bin"}, check=True, timeout=30,
                )  # fmt: skip
                read = container.get("args", [])
                reads = [b for a, b in itertools.pairwise(read) if a == "--config"]
                reads += [env["MOONCAKE_CONFIG_PATH"]] if "MOONCAKE_CONFIG_PATH" in env else []
                if command[2:3] and command[2] not in reads:
                    problems.append(f"{where}: fills {command[2]}, but the process reads {reads}")
                yield where, container, json.loads(filled.read_text()), problems


def mooncake_address_problems(objects: Sequence[Mapping[str, Any]], folder: Path) -> list[str]:
    """Each filled Mooncake config: the master named by a Service of the manifest forwarding its port to the
    master; local_hostname, where the config has one, the pod's own address."""
    problems: list[str] = []
    for where, _, config, found in filled_configs(objects, folder):
        problems += found
        host, _, port = str(config["master_server_address"]).rpartition(":")
        if not forwards(objects, host, int(port)):
            problems.append(f"{where}: master_server_address {host}:{port} is no Service forwarding {port}")
        hostname = config.get("local_hostname")
        if hostname is not None and hostname != POD_IP:
            problems.append(f"{where}: advertises local_hostname {hostname}, not its pod's address")
    return problems
