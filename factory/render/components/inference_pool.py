"""The kustomize component `inference-pool` of each deployment the plan pools (in its folder's
`inference-pool/`): an InferencePool (the Gateway API Inference Extension's inference.networking.k8s.io/v1)
over every pod of it that serves the API, at the API port, naming the endpoint picker the user runs (the
fleet's `{name}-epp` Service by default: patch `endpointPickerRef` to yours). The picker chooses a server per
request from the servers' own metrics (the waiting queue, the KV cache's use) and the prompt's prefix; the
factory ships none. Prefill/decode deployments get none (the plan says why)."""

from __future__ import annotations

from typing import Any

from factory.base.errors import InputError
from factory.base.outputs import OutputFile
from factory.plan.deployment import Deployment
from factory.render.kubernetes import INSTANCE_LABEL, SERVES_API, SERVES_LABEL, deployable, object_name
from factory.render.kubernetes.files import component, of_deployment

PART = "inference-pool"


def pool(deployment: Deployment) -> dict[str, Any]:
    picker = deployment.fleet.picker
    assert picker is not None  # files() prints pools only where the plan names a picker
    name = object_name(deployment)
    ports = sorted(
        {g.spec.port for g in deployment.run if g.spec.program == "vllm" and g.spec.probe is not None}
    )
    if len(ports) != 1:
        raise InputError(
            f"{deployment.name}: its servers listen on several ports, which one pool cannot target",
            field="port",
            value=ports,
        )
    return of_deployment(
        deployment,
        "inference.networking.k8s.io/v1",
        "InferencePool",
        {
            "selector": {"matchLabels": {INSTANCE_LABEL: name, SERVES_LABEL: SERVES_API}},
            "targetPorts": [{"number": ports[0]}],
            "endpointPickerRef": {
                "name": picker.service.format(name=name),
                "port": {"number": picker.port},
                "failureMode": picker.failure_mode,
            },
        },
    )


def files(deployment: Deployment) -> list[OutputFile]:
    if deployment.fleet.picker is None or not deployable(deployment):
        return []
    notes = [
        "An InferencePool for a gateway of the Gateway API Inference Extension (v1.6.0's CRD): route to it",
        "with an HTTPRoute whose backendRef is this pool; run the endpoint picker it names (llm-d's, or the",
        "extension's own lightweight one) as a Service of that name and port.",
    ]
    return component(deployment, PART, [pool(deployment)], notes, [])
