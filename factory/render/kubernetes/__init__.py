"""The Kubernetes format: per deployment one manifest file and a kustomization, printed from its run spec.

One node: a Deployment and a Service. Multi-node: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) whose
leader runs the head's spec and whose workers run the one worker spec, the rank taken from LWS's
$(LWS_WORKER_INDEX), plus a Service over the pods that serve HTTP.

A Mooncake KV store: one workload per unit (the master, the store service, each instance, the router), each
with its Service, and its generated configs as a ConfigMap; a pod whose process starts after others waits
for their Services in an init container (kv.py).

Prefill/decode: one LeaderWorkerSet per pool (size = the pool's nodes, 1 for a one-node pool) and the router
as a Deployment with the Service in front of it, not LWS's DisaggregatedSet. Why: the router names each pool
node by address, and an LWS we name gives every node a stable DNS name (`<pool>-0` its leader, `<pool>-0-<i>`
its other nodes, under LWS's headless Service `<pool>`), while the LWSs a DisaggregatedSet makes are named
by its controller (their names are not in its CRD) and it has no place for the router (llm-d runs it as a
sidecar); and a DisaggregatedSet needs LWS v0.9.0, these manifests the same v0.7.0 as every other LWS here.
What a DisaggregatedSet adds, rolling the pools out together, is not needed for one copy of the deployment.

Everything Kubernetes-specific lives in this package, one module per job (names, the pod values of settings,
pods, the ConfigMap, the objects they are built of, prefill/decode, KV stores, the workloads, the files);
the only mapping from compose settings to pod values is SETTING_VALUES (values.py, with each group's table:
table_of). The objects are plain mappings checked by the schemas they are
applied against (the LWS CRD of each claimed release, Kubernetes' own, through `kubernetes-validate`) in
tests; this package decides no run option.
"""

from factory.render.kubernetes.config_map import settings_used
from factory.render.kubernetes.files import files, kustomization, render
from factory.render.kubernetes.names import (
    CLAIM_COMPONENT,
    COMPONENT_LABEL,
    IMAGES_COMPONENT,
    INSTANCE_LABEL,
    KUBERNETES_VERSIONS,
    LWS_API,
    LWS_INDEX_LABEL,
    LWS_NAME_LABEL,
    MANAGED_BY,
    MIN_LWS,
    NAME_BUDGET,
    NAME_LABEL,
    NETWORK_POLICY_FILE,
    ROOT,
    ROUTER,
    SERVER_COMPONENT,
    SERVES_API,
    SERVES_LABEL,
    TEMPLATE_PATHS,
    deployable,
    directory,
    object_name,
    unit,
    unit_names,
    unit_services,
)
from factory.render.kubernetes.pods import CANNOT_EXPRESS, DEVICE_ENV, WAIT_CONTAINER, WAIT_SCRIPT
from factory.render.kubernetes.values import (
    BOUND_ENV,
    POD_ADDRESS,
    POD_IP,
    RANK_SCRIPT,
    SETTING_VALUES,
    node_address,
    pool_names,
    pool_sizes,
    table_of,
)
from factory.render.kubernetes.workloads import objects

__all__ = [
    "BOUND_ENV",
    "CANNOT_EXPRESS",
    "CLAIM_COMPONENT",
    "COMPONENT_LABEL",
    "DEVICE_ENV",
    "IMAGES_COMPONENT",
    "INSTANCE_LABEL",
    "KUBERNETES_VERSIONS",
    "LWS_API",
    "LWS_INDEX_LABEL",
    "LWS_NAME_LABEL",
    "MANAGED_BY",
    "MIN_LWS",
    "NAME_BUDGET",
    "NAME_LABEL",
    "NETWORK_POLICY_FILE",
    "POD_ADDRESS",
    "POD_IP",
    "RANK_SCRIPT",
    "ROOT",
    "ROUTER",
    "SERVER_COMPONENT",
    "SERVES_API",
    "SERVES_LABEL",
    "SETTING_VALUES",
    "TEMPLATE_PATHS",
    "WAIT_CONTAINER",
    "WAIT_SCRIPT",
    "deployable",
    "directory",
    "files",
    "kustomization",
    "node_address",
    "object_name",
    "objects",
    "pool_names",
    "pool_sizes",
    "render",
    "settings_used",
    "table_of",
    "unit",
    "unit_names",
    "unit_services",
]
