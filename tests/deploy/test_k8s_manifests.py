"""The Kubernetes manifests of ``deploy/k8s`` are valid and keep their safety and wiring invariants.

Every manifest is validated against the JSON schemas of Kubernetes bundled with
``kubernetes-validate`` (strict: an unknown or misspelt field is an error), for the oldest version
the manifests support (1.30: ``lifecycle.preStop.sleep``) and the newest the package bundles. KEDA's
``ScaledObject`` is a CRD with no bundled schema: it is checked structurally. The rest is read from
the YAML: every container runs as non-root without privilege escalation on a read-only root file
system with resources set; the server's probes hit ``/readyz`` and ``/healthz`` on the port it
listens on; the Service, PodDisruptionBudget, HPA and NetworkPolicy select or target the right pods;
the grace period outlasts the drain; the example Secret holds only placeholders; the config file
and the container arguments are accepted by the real ``agentrt serve`` and ``agentrt worker``.
Each check returns the problems it finds, so ``test_a_broken_copy_fails`` can show that a broken
copy of the folder fails. ``kubectl kustomize`` (offline) builds the kustomization and its
components when kubectl is installed; under ``CI=true`` a missing kubectl fails instead of skipping.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

ROOT = Path(__file__).parents[2]
K8S = ROOT / "deploy" / "k8s"
DOCS = ROOT / "docs" / "deployment.md"

MIN_KUBERNETES = "1.30.0"
"""The oldest Kubernetes the manifests support (``lifecycle.preStop.sleep`` is on by default from 1.30)."""
KUBERNETES_VERSIONS = (MIN_KUBERNETES, kubernetes_validate.latest_version())

PORT = 8000
"""The port `agentrt serve` listens on (its default), the Service's port and the probes'."""
READYZ_TIMEOUT = 2.0
"""How long ``/readyz`` waits for a state store (`agentrt.server.context._READY_TIMEOUT`)."""
QUEUE_METRIC = "agentrt_jobs_queued"
SECRET_EXAMPLE = "secret.example.yaml"
PLACEHOLDER = "CHANGE-ME"
KUSTOMIZE_KINDS = {"Kustomization", "Component"}


@dataclass(frozen=True, slots=True)
class Manifest:
    """One YAML document of a file under the folder."""

    file: str
    """Path relative to the folder."""
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.doc.get("metadata") or {}).get("name", ""))

    def __str__(self) -> str:
        return f"{self.file}: {self.kind}/{self.name}"


def load_manifests(root: Path) -> list[Manifest]:
    """Every YAML document under `root` (kustomization files included), in path order."""
    found: list[Manifest] = []
    for path in sorted(root.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                assert isinstance(doc, dict), f"{path}: a document is not a mapping"
                found.append(Manifest(path.relative_to(root).as_posix(), doc))
    return found


def resources(manifests: list[Manifest]) -> list[Manifest]:
    return [m for m in manifests if m.kind not in KUSTOMIZE_KINDS]


def of_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m.kind == kind]


def dig(doc: Any, *keys: str | int) -> Any:
    """``doc[k1][k2]...``, None when a step is missing."""
    for key in keys:
        if isinstance(key, int):
            if not isinstance(doc, list) or len(doc) <= key:
                return None
        elif not isinstance(doc, dict):
            return None
        doc = doc[key] if isinstance(key, int) else doc.get(key)
    return doc


def number(value: Any, default: float) -> float:
    """`value` when it is a number (the schemas report the others), else `default`."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default


# ---- schemas ------------------------------------------------------------------------------------


def schema_problems(manifests: list[Manifest]) -> list[str]:
    """Each resource against the strict Kubernetes schemas (KEDA's ScaledObject structurally)."""
    problems: list[str] = []
    for m in resources(manifests):
        if str(m.doc.get("apiVersion", "")).startswith("keda.sh/"):
            problems += [f"{m}: {p}" for p in scaled_object_problems(m.doc)]
            continue
        for version in KUBERNETES_VERSIONS:
            problems += [f"{m} (Kubernetes {version}): {p}" for p in validate(m.doc, version)]
    return problems


def validate(doc: dict[str, Any], version: str) -> list[str]:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top)"
        return [f"{exc.message} at {where}"]
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [exc.message]
    return []


SCALED_OBJECT_SPEC = {
    "scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod", "idleReplicaCount",
    "minReplicaCount", "maxReplicaCount", "advanced", "fallback", "triggers",
}  # fmt: skip
TRIGGER_KEYS = {"type", "name", "metadata", "metricType", "authenticationRef", "useCachedMetrics"}
TRIGGER_METADATA = {"prometheus": {"serverAddress", "query", "threshold"}, "cpu": {"value"}, "memory": {"value"}}


def scaled_object_problems(doc: dict[str, Any]) -> list[str]:
    """KEDA's ``keda.sh/v1alpha1`` ScaledObject: the fields KEDA requires, with the right types."""
    problems: list[str] = []
    if doc.get("apiVersion") != "keda.sh/v1alpha1" or doc.get("kind") != "ScaledObject":
        problems.append(f"expected keda.sh/v1alpha1 ScaledObject, got {doc.get('apiVersion')} {doc.get('kind')}")
    unknown = set(doc) - {"apiVersion", "kind", "metadata", "spec"}
    if unknown:
        problems.append(f"unknown top-level fields {sorted(unknown)}")
    if not dig(doc, "metadata", "name"):
        problems.append("metadata.name is missing")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return [*problems, "spec is missing"]
    if set(spec) - SCALED_OBJECT_SPEC:
        problems.append(f"unknown spec fields {sorted(set(spec) - SCALED_OBJECT_SPEC)}")
    if not isinstance(dig(spec, "scaleTargetRef", "name"), str):
        problems.append("spec.scaleTargetRef.name is missing")
    low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high):
        problems.append(f"replica counts must be integers with min <= max, not {low!r} / {high!r}")
    behavior = dig(spec, "advanced", "horizontalPodAutoscalerConfig", "behavior")
    if behavior is not None:
        # The behavior is an HPA's: validate it inside one.
        hpa = {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "x"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 1, "behavior": behavior},
        }  # fmt: skip
        problems += [f"advanced.horizontalPodAutoscalerConfig.behavior: {p}" for p in validate(hpa, MIN_KUBERNETES)]
    triggers = spec.get("triggers")
    if not isinstance(triggers, list) or not triggers:
        return [*problems, "spec.triggers must be a non-empty list"]
    for i, trigger in enumerate(triggers):
        if not isinstance(trigger, dict) or not isinstance(trigger.get("type"), str):
            problems.append(f"triggers[{i}] needs a type")
            continue
        if set(trigger) - TRIGGER_KEYS:
            problems.append(f"triggers[{i}]: unknown fields {sorted(set(trigger) - TRIGGER_KEYS)}")
        metadata = trigger.get("metadata")
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            problems.append(f"triggers[{i}].metadata must map names to strings")
            continue
        missing = TRIGGER_METADATA.get(trigger["type"], set()) - set(metadata)
        if missing:
            problems.append(f"triggers[{i}] ({trigger['type']}): metadata lacks {sorted(missing)}")
        if trigger.get("metricType", "AverageValue") not in ("AverageValue", "Value", "Utilization"):
            problems.append(f"triggers[{i}]: unknown metricType {trigger.get('metricType')!r}")
    return problems


# ---- kustomization ------------------------------------------------------------------------------


def kustomization_problems(root: Path) -> list[str]:
    """Every listed file exists, every manifest of a folder is listed, the example Secret is not."""
    problems: list[str] = []
    for path in sorted(root.rglob("kustomization.yaml")):
        folder = path.parent
        doc = yaml.safe_load(path.read_text())
        where = path.relative_to(root).as_posix()
        if doc.get("kind") not in KUSTOMIZE_KINDS:
            problems.append(f"{where}: kind must be Kustomization or Component, not {doc.get('kind')!r}")
        listed = [*(doc.get("resources") or []), *(doc.get("components") or [])]
        for entry in listed:
            if not (folder / entry).exists():
                problems.append(f"{where}: lists {entry!r}, which does not exist")
        if SECRET_EXAMPLE in listed:
            problems.append(f"{where}: lists {SECRET_EXAMPLE} (its placeholder API keys would work)")
        for manifest in sorted(folder.glob("*.yaml")):
            if manifest.name not in {"kustomization.yaml", SECRET_EXAMPLE} and manifest.name not in listed:
                problems.append(f"{where}: does not list {manifest.name}")
    return problems


# ---- pods ---------------------------------------------------------------------------------------


def pod_spec(m: Manifest) -> dict[str, Any]:
    spec = dig(m.doc, "spec", "template", "spec")
    return spec if isinstance(spec, dict) else {}


def containers(m: Manifest) -> list[dict[str, Any]]:
    spec = pod_spec(m)
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def pod_labels(m: Manifest) -> dict[str, str]:
    return dict(dig(m.doc, "spec", "template", "metadata", "labels") or {})


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether a ``matchLabels`` selector (no expressions here) selects `labels`."""
    if not selector or set(selector) - {"matchLabels"}:
        return False
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def pod_security_problems(manifests: list[Manifest]) -> list[str]:
    """Every workload: non-root, no privilege escalation, read-only root, no capabilities, resources."""
    problems: list[str] = []
    for m in resources(manifests):
        if m.kind not in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            continue
        spec = pod_spec(m)
        pod = spec.get("securityContext") or {}
        for flag in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(flag):
                problems.append(f"{m}: {flag} is set")
        if spec.get("automountServiceAccountToken") is not False:
            problems.append(f"{m}: automountServiceAccountToken must be false")
        if not selects(dig(m.doc, "spec", "selector"), pod_labels(m)):
            problems.append(f"{m}: spec.selector does not select the pod template's labels")
        for c in containers(m):
            sc = c.get("securityContext") or {}
            where = f"{m} container {c.get('name')}"

            def setting(key: str, sc: dict[str, Any] = sc, pod: dict[str, Any] = pod) -> Any:
                return sc[key] if key in sc else pod.get(key)

            if setting("runAsNonRoot") is not True:
                problems.append(f"{where}: runAsNonRoot must be true")
            if setting("runAsUser") == 0:
                problems.append(f"{where}: runAsUser is 0")
            if dig(setting("seccompProfile"), "type") != "RuntimeDefault":
                problems.append(f"{where}: seccompProfile must be RuntimeDefault")
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: allowPrivilegeEscalation must be false")
            if sc.get("privileged"):
                problems.append(f"{where}: privileged")
            if sc.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: readOnlyRootFilesystem must be true")
            if dig(sc, "capabilities", "drop") != ["ALL"] or dig(sc, "capabilities", "add"):
                problems.append(f"{where}: capabilities must drop ALL and add none")
            for part in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    if not dig(c, "resources", part, resource):
                        problems.append(f"{where}: resources.{part}.{resource} is not set")
            image = str(c.get("image", ""))
            if ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
                problems.append(f"{where}: image {image!r} needs a pinned tag")
    return problems


# ---- the server's wiring ------------------------------------------------------------------------


def container_port(container: dict[str, Any], port: Any) -> int | None:
    """A probe's or Service's port (number or name) as the container's port number."""
    for p in container.get("ports") or []:
        if port in (p.get("name"), p.get("containerPort")):
            return int(p["containerPort"])
    return None


def server_deployments(manifests: list[Manifest]) -> list[Manifest]:
    """Deployments whose containers run ``agentrt serve``."""
    return [m for m in of_kind(manifests, "Deployment") if any("serve" in (c.get("args") or []) for c in containers(m))]


def config_file(manifests: list[Manifest]) -> tuple[str, dict[str, str]] | None:
    """The ConfigMap named ``agentrt-config``: (name, data)."""
    for m in of_kind(manifests, "ConfigMap"):
        if m.name == "agentrt-config":
            return m.name, dict(m.doc.get("data") or {})
    return None


def shutdown_timeout(manifests: list[Manifest]) -> float:
    import tomllib

    found = config_file(manifests)
    data = tomllib.loads(found[1].get("agentrt.toml", "")) if found else {}
    return float(data.get("shutdown_timeout", 10.0))


def probe_problems(m: Manifest, c: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    where = f"{m} container {c.get('name')}"
    if container_port(c, PORT) != PORT:
        problems.append(f"{where}: no containerPort {PORT}")
    expected = {"readinessProbe": "/readyz", "livenessProbe": "/healthz", "startupProbe": "/healthz"}
    for probe, path in expected.items():
        get = dig(c, probe, "httpGet")
        if not isinstance(get, dict):
            problems.append(f"{where}: {probe} must be an httpGet probe")
            continue
        if get.get("path") != path:
            problems.append(f"{where}: {probe} must GET {path}, not {get.get('path')!r}")
        if container_port(c, get.get("port")) != PORT:
            problems.append(f"{where}: {probe} port {get.get('port')!r} is not the server's port {PORT}")
    if number(dig(c, "readinessProbe", "timeoutSeconds"), 1) <= READYZ_TIMEOUT:
        problems.append(f"{where}: readinessProbe.timeoutSeconds must exceed /readyz's {READYZ_TIMEOUT} s store check")
    return problems


def drain_problems(m: Manifest, manifests: list[Manifest]) -> list[str]:
    """The kubelet waits for the preStop sleep and the whole shutdown before it kills the server.

    On SIGTERM `agentrt serve` drains its jobs (durable runs: finish within ``shutdown_timeout``, then
    cancel and hand back within half of it more), then interrupts its in-process runs (the same
    bound again): at most 3 x ``shutdown_timeout`` after the preStop sleep.
    """
    spec = pod_spec(m)
    grace = number(spec.get("terminationGracePeriodSeconds"), 30)
    problems: list[str] = []
    for c in spec.get("containers") or []:
        sleep = dig(c, "lifecycle", "preStop", "sleep", "seconds")
        if not isinstance(sleep, int) or sleep < 5:
            problems.append(f"{m}: a preStop sleep of 5 s or more must let the endpoints drain")
            sleep = 0
        needed = sleep + 3 * shutdown_timeout(manifests)
        if grace <= needed:
            problems.append(
                f"{m}: terminationGracePeriodSeconds {grace} must exceed preStop + 3 x shutdown_timeout ({needed})"
            )
    return problems


def worker_problems(manifests: list[Manifest]) -> list[str]:
    """`agentrt worker` pods: the kubelet waits for their drain (1.5 x ``--grace``); nothing routes HTTP to them."""
    problems: list[str] = []
    services = of_kind(manifests, "Service")
    for m in of_kind(manifests, "Deployment"):
        for c in pod_spec(m).get("containers") or []:
            args = [str(a) for a in c.get("args") or []]
            if args[:1] != ["worker"]:
                continue
            grace = float(args[args.index("--grace") + 1]) if "--grace" in args else 10.0
            period = number(pod_spec(m).get("terminationGracePeriodSeconds"), 30)
            if period <= 1.5 * grace:
                problems.append(f"{m}: terminationGracePeriodSeconds {period} must exceed 1.5 x --grace ({grace})")
            if c.get("ports"):
                problems.append(f"{m}: the worker serves no HTTP and declares no port")
            for service in services:
                if selects({"matchLabels": dig(service.doc, "spec", "selector") or {}}, pod_labels(m)):
                    problems.append(f"{service}: routes HTTP to the worker {m}")
    return problems


def spread_problems(m: Manifest) -> list[str]:
    for constraint in pod_spec(m).get("topologySpreadConstraints") or []:
        if constraint.get("topologyKey") == "kubernetes.io/hostname" and selects(
            constraint.get("labelSelector"), pod_labels(m)
        ):
            return []
    return [f"{m}: needs a topologySpreadConstraint across nodes (kubernetes.io/hostname) on its own pods"]


def server_problems(manifests: list[Manifest]) -> list[str]:
    """Probes, drain, spread, and the Service, PDB, HPA and NetworkPolicy that belong to the server."""
    problems: list[str] = []
    servers = server_deployments(manifests)
    if len(servers) != 1:
        return [f"expected one Deployment running `agentrt serve`, found {[str(m) for m in servers]}"]
    server = servers[0]
    labels = pod_labels(server)
    c = pod_spec(server)["containers"][0]
    problems += probe_problems(server, c)
    problems += drain_problems(server, manifests)
    problems += spread_problems(server)
    if number(dig(server.doc, "spec", "replicas"), 1) < 3:
        problems.append(f"{server}: run at least 3 replicas")
    problems += service_problems(manifests, server, c)
    problems += pdb_problems(manifests, server)
    problems += hpa_problems(manifests, server)
    problems += network_policy_problems(manifests, labels)
    return problems


def service_problems(manifests: list[Manifest], server: Manifest, c: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    services = of_kind(manifests, "Service")
    if len(services) != 1:
        return [f"expected one Service, found {len(services)}"]
    service = services[0]
    selector = dig(service.doc, "spec", "selector") or {}
    if not selects({"matchLabels": selector}, pod_labels(server)):
        problems.append(f"{service}: selector {selector} does not select the server's pods")
    for other in of_kind(manifests, "Deployment"):
        if other is not server and selects({"matchLabels": selector}, pod_labels(other)):
            problems.append(f"{service}: selector {selector} also selects {other}, which serves no HTTP")
    if dig(service.doc, "spec", "type") not in (None, "ClusterIP"):
        problems.append(f"{service}: type must be ClusterIP")
    ports = dig(service.doc, "spec", "ports") or []
    if [p.get("port") for p in ports] != [PORT]:
        problems.append(f"{service}: must expose port {PORT} only")
    for p in ports:
        if container_port(c, p.get("targetPort", p.get("port"))) != PORT:
            problems.append(f"{service}: targetPort {p.get('targetPort')!r} is not the server's port")
    return problems


def pdb_problems(manifests: list[Manifest], server: Manifest) -> list[str]:
    """Every PDB selects exactly one Deployment's pods; the server has one."""
    problems: list[str] = []
    covered = set()
    for pdb in of_kind(manifests, "PodDisruptionBudget"):
        matched = [
            d for d in of_kind(manifests, "Deployment") if selects(dig(pdb.doc, "spec", "selector"), pod_labels(d))
        ]
        if len(matched) != 1:
            problems.append(f"{pdb}: selector matches {[d.name for d in matched]}, not exactly one Deployment")
            continue
        covered.add(matched[0].name)
        spec = pdb.doc["spec"]
        replicas = number(dig(matched[0].doc, "spec", "replicas"), 1)
        if "minAvailable" in spec and not (isinstance(spec["minAvailable"], int) and spec["minAvailable"] < replicas):
            problems.append(f"{pdb}: minAvailable {spec['minAvailable']!r} leaves no pod to evict")
        if "maxUnavailable" in spec and spec["maxUnavailable"] in (0, "0%"):
            problems.append(f"{pdb}: maxUnavailable 0 blocks every node drain")
    if server.name not in covered:
        problems.append(f"{server}: no PodDisruptionBudget selects its pods")
    return problems


def hpa_problems(manifests: list[Manifest], server: Manifest) -> list[str]:
    """Every HPA targets a Deployment that exists; the server's scales on CPU and queue depth."""
    problems: list[str] = []
    deployments = {d.name: d for d in of_kind(manifests, "Deployment")}
    targeted = set()
    for hpa in of_kind(manifests, "HorizontalPodAutoscaler"):
        ref = dig(hpa.doc, "spec", "scaleTargetRef") or {}
        target = deployments.get(ref.get("name", ""))
        if ref.get("kind") != "Deployment" or ref.get("apiVersion") != "apps/v1" or target is None:
            problems.append(f"{hpa}: scaleTargetRef {ref} is not a Deployment of these manifests")
            continue
        targeted.add(target.name)
        metrics = dig(hpa.doc, "spec", "metrics") or []
        uses_cpu = any(dig(x, "resource", "name") == "cpu" for x in metrics if x.get("type") == "Resource")
        if uses_cpu and not all(dig(c, "resources", "requests", "cpu") for c in containers(target)):
            problems.append(f"{hpa}: scales on CPU utilisation but {target} requests no CPU")
        if number(dig(hpa.doc, "spec", "minReplicas"), 1) < 2:
            problems.append(f"{hpa}: minReplicas below 2 leaves a single replica")
        if target is server:
            queue = [x for x in metrics if x.get("type") == "External" and dig(x, "external", "metric", "name")]
            if not uses_cpu:
                problems.append(f"{hpa}: the server's HPA must scale on CPU")
            if [dig(x, "external", "metric", "name") for x in queue] != [QUEUE_METRIC]:
                problems.append(f"{hpa}: the server's HPA must scale on the External metric {QUEUE_METRIC}")
    if server.name not in targeted and not any(
        dig(s.doc, "spec", "scaleTargetRef", "name") == server.name for s in of_kind(manifests, "ScaledObject")
    ):
        problems.append(f"{server}: no HorizontalPodAutoscaler (or ScaledObject) scales it")
    return problems


def network_policy_problems(manifests: list[Manifest], server_labels: dict[str, str]) -> list[str]:
    """The server's policy: ingress on 8000 only, egress to DNS and HTTPS; every workload is covered."""
    problems: list[str] = []
    for d in of_kind(manifests, "Deployment"):
        if not any(
            selects(dig(p.doc, "spec", "podSelector"), pod_labels(d)) for p in of_kind(manifests, "NetworkPolicy")
        ):
            problems.append(f"{d}: no NetworkPolicy selects its pods")
    for policy in of_kind(manifests, "NetworkPolicy"):
        spec = policy.doc.get("spec") or {}
        if set(spec.get("policyTypes") or []) != {"Ingress", "Egress"}:
            problems.append(f"{policy}: policyTypes must be [Ingress, Egress]")
        serves = selects(spec.get("podSelector"), server_labels)
        for rule in spec.get("ingress") or []:
            ports = [p.get("port") for p in rule.get("ports") or []]
            if not serves or not ports or any(p not in (PORT, "http") for p in ports):
                problems.append(
                    f"{policy}: an ingress rule opens {ports or 'every port'}, not only {PORT} of the server"
                )
            if not rule.get("from"):
                problems.append(f"{policy}: an ingress rule admits every source")
        egress_ports = {
            (p.get("port"), p.get("protocol", "TCP")) for r in spec.get("egress") or [] for p in r.get("ports") or []
        }
        for needed in ((53, "UDP"), (53, "TCP"), (443, "TCP")):
            if needed not in egress_ports:
                problems.append(f"{policy}: egress lacks port {needed[0]}/{needed[1]}")
    return problems


# ---- the example Secret -------------------------------------------------------------------------

REAL_LOOKING = [
    re.compile(p)
    for p in (
        r"sk-[A-Za-z0-9_-]{20,}",  # OpenAI, Anthropic, DeepSeek
        r"AKIA[0-9A-Z]{16}",  # AWS access key id
        r"AIza[0-9A-Za-z_-]{30,}",  # Google API key
        r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub token
        r"xox[abprs]-[A-Za-z0-9-]+",  # Slack token
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
        r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",  # a JWT
    )
]


def secret_problems(manifests: list[Manifest]) -> list[str]:
    """Secrets in the folder are examples: stringData only, every value a visible placeholder."""
    problems: list[str] = []
    secrets = of_kind(manifests, "Secret")
    if [m.file for m in secrets] != [SECRET_EXAMPLE]:
        problems.append(f"the only Secret must be {SECRET_EXAMPLE}, found {[m.file for m in secrets]}")
    for m in secrets:
        if m.doc.get("data"):
            problems.append(f"{m}: use stringData with visible placeholders, not base64 data")
        for key, value in (m.doc.get("stringData") or {}).items():
            text = str(value)
            if PLACEHOLDER not in text:
                problems.append(f"{m}: {key} has no {PLACEHOLDER} placeholder")
            if any(p.search(text) for p in REAL_LOOKING):
                problems.append(f"{m}: {key} looks like a real credential")
            for token in re.findall(r"[A-Za-z0-9+/=_-]{20,}", text):
                if PLACEHOLDER not in token:
                    problems.append(f"{m}: {key} holds a long token that is no placeholder")
    return problems


def reference_problems(manifests: list[Manifest]) -> list[str]:
    """The ConfigMaps, Secrets and ServiceAccounts the pods name are those of the folder."""
    problems: list[str] = []
    names = {(m.kind, m.name) for m in resources(manifests)}
    for d in of_kind(manifests, "Deployment"):
        spec = pod_spec(d)
        wanted = {("ServiceAccount", spec.get("serviceAccountName", "default"))}
        for volume in spec.get("volumes") or []:
            if "configMap" in volume:
                wanted.add(("ConfigMap", volume["configMap"]["name"]))
        for c in containers(d):
            for source in c.get("envFrom") or []:
                if "secretRef" in source:
                    wanted.add(("Secret", source["secretRef"]["name"]))
                if "configMapRef" in source:
                    wanted.add(("ConfigMap", source["configMapRef"]["name"]))
            for env in c.get("env") or []:
                if dig(env, "valueFrom", "configMapKeyRef", "name"):
                    wanted.add(("ConfigMap", env["valueFrom"]["configMapKeyRef"]["name"]))
                if dig(env, "valueFrom", "secretKeyRef", "name"):
                    wanted.add(("Secret", env["valueFrom"]["secretKeyRef"]["name"]))
        problems += [f"{d}: refers to {kind} {name!r}, which is not here" for kind, name in sorted(wanted - names)]
    return problems


def all_problems(root: Path) -> list[str]:
    manifests = load_manifests(root)
    return [
        *schema_problems(manifests),
        *kustomization_problems(root),
        *pod_security_problems(manifests),
        *server_problems(manifests),
        *worker_problems(manifests),
        *secret_problems(manifests),
        *reference_problems(manifests),
    ]


# ---- tests --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def manifests() -> list[Manifest]:
    return load_manifests(K8S)


def test_the_folder_has_the_expected_resources(manifests: list[Manifest]) -> None:
    kinds = {m.kind for m in resources(manifests)}
    expected = {"Namespace", "ServiceAccount", "ConfigMap", "Secret", "Deployment", "Service"}
    expected |= {"PodDisruptionBudget", "HorizontalPodAutoscaler", "NetworkPolicy", "ScaledObject"}
    assert kinds == expected


def test_every_manifest_passes_the_kubernetes_schemas(manifests: list[Manifest]) -> None:
    assert schema_problems(manifests) == []


def test_the_kustomizations_list_every_manifest_but_the_example_secret() -> None:
    assert kustomization_problems(K8S) == []


def test_every_container_is_locked_down(manifests: list[Manifest]) -> None:
    assert pod_security_problems(manifests) == []


def test_the_server_is_wired_to_its_probes_service_pdb_hpa_and_network_policy(manifests: list[Manifest]) -> None:
    assert server_problems(manifests) == []


def test_the_example_secret_holds_only_placeholders(manifests: list[Manifest]) -> None:
    assert secret_problems(manifests) == []


def test_the_pods_refer_to_resources_of_the_folder(manifests: list[Manifest]) -> None:
    assert reference_problems(manifests) == []


def test_the_config_file_is_accepted_by_agentrt_serve(manifests: list[Manifest], tmp_path: Path) -> None:
    from agentrt.server._serve import load_config

    found = config_file(manifests)
    assert found is not None
    path = tmp_path / "agentrt.toml"
    path.write_text(found[1]["agentrt.toml"])
    settings = load_config(path, environ={})
    # Secrets come from the Secret, never from the ConfigMap.
    assert settings.api_keys == {}
    assert settings.store is None
    assert settings.shutdown_timeout == shutdown_timeout(manifests)


def pod_environment(container: dict[str, Any], manifests: list[Manifest]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: envFrom (the example Secret), then env."""
    configs = {m.name: dict(m.doc.get("data") or {}) for m in of_kind(manifests, "ConfigMap")}
    secrets = {m.name: dict(m.doc.get("stringData") or {}) for m in of_kind(manifests, "Secret")}
    environment: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        if "secretRef" in source:
            environment |= secrets[source["secretRef"]["name"]]
        if "configMapRef" in source:
            environment |= configs[source["configMapRef"]["name"]]
    for env in container.get("env") or []:
        ref = dig(env, "valueFrom", "configMapKeyRef")
        environment[env["name"]] = configs[ref["name"]][ref["key"]] if ref else str(env.get("value", ""))
    return environment


def parse_cli(
    m: Manifest, manifests: list[Manifest], monkeypatch: pytest.MonkeyPatch
) -> tuple[str, dict[str, Any]] | None:
    """(sub-command, its parameters) as the real `agentrt` parses the container's arguments and environment.

    ``$(VAR)`` in the arguments is replaced as the kubelet does; the environment is the pod's (the
    options read their ``AGENTRT_*`` variables). None when this `agentrt` has no such sub-command.
    """
    import typer

    from agentrt.cli import build_app

    (container,) = pod_spec(m)["containers"]
    assert container.get("command") == ["agentrt"], f"{m}: the command must be agentrt"
    environment = pod_environment(container, manifests)
    args = [re.sub(r"\$\((\w+)\)", lambda x: environment[x.group(1)], str(a)) for a in container.get("args") or []]
    for name in [n for n in os.environ if n.startswith("AGENTRT_")]:
        monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    group = typer.main.get_command(build_app())
    command = group.commands.get(args[0])  # type: ignore[attr-defined]
    if command is None:
        return None
    return args[0], dict(command.make_context(args[0], args[1:]).params)


def test_the_server_arguments_are_accepted_by_agentrt_serve(
    manifests: list[Manifest], monkeypatch: pytest.MonkeyPatch
) -> None:
    (server,) = server_deployments(manifests)
    parsed = parse_cli(server, manifests, monkeypatch)
    assert parsed is not None
    name, params = parsed
    assert name == "serve"
    assert params["target"] == "myapp.agents:build_agents"
    assert params["host"] == "0.0.0.0"  # the default, 127.0.0.1, is unreachable from the Service
    assert params["port"] == PORT
    mounts = {v["mountPath"] for v in pod_spec(server)["containers"][0]["volumeMounts"] if v["name"] == "config"}
    assert {str(Path(params["config"]).parent)} == mounts
    secret = pod_environment(pod_spec(server)["containers"][0], manifests)
    if "jobs" in params:  # durable runs, from AGENTRT_JOBS_URL in the Secret
        assert params["jobs"] == secret["AGENTRT_JOBS_URL"]


def test_the_worker_arguments_are_accepted_by_agentrt_worker(
    manifests: list[Manifest], monkeypatch: pytest.MonkeyPatch
) -> None:
    (worker,) = [m for m in of_kind(manifests, "Deployment") if m.name == "agentrt-worker"]
    parsed = parse_cli(worker, manifests, monkeypatch)
    if parsed is None:
        pytest.skip("this agentrt has no `worker` command yet (it comes with the job runner)")
    name, params = parsed
    assert name == "worker"
    assert params["target"] == "myapp.agents:build_agents"
    assert params["jobs"] == pod_environment(pod_spec(worker)["containers"][0], manifests)["AGENTRT_JOBS_URL"]
    assert params["grace"] == 30


def test_the_docs_describe_every_manifest() -> None:
    text = DOCS.read_text()
    for path in sorted(K8S.rglob("*.yaml")):
        name = path.relative_to(K8S).as_posix()
        assert name in text or path.name in text, f"docs/deployment.md does not mention {name}"
    assert QUEUE_METRIC in text


# ---- a broken copy fails ------------------------------------------------------------------------

BREAKAGES: dict[str, tuple[str, str, str, str]] = {
    # id: (file, text, replacement, a piece of the expected problem)
    "misspelt field": ("deployment.yaml", "readinessProbe:", "readinessProbes:", "'readinessProbes' was unexpected"),
    "wrong type": ("deployment.yaml", "replicas: 3", "replicas: three", "'three' is not of type 'integer'"),
    "unknown HPA field": ("hpa.yaml", "minReplicas: 3", "minReplica: 3", "'minReplica' was unexpected"),
    "root": ("deployment.yaml", "runAsNonRoot: true\n          ", "runAsNonRoot: false\n          ", "runAsNonRoot"),
    "writable root": ("deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnly"),
    "escalation": (
        "deployment.yaml",
        "allowPrivilegeEscalation: false",
        "allowPrivilegeEscalation: true",
        "allowPrivilegeEscalation",
    ),
    "capabilities": ("deployment.yaml", 'drop: ["ALL"]', 'drop: ["NET_RAW"]', "capabilities"),
    "no limits": (
        "deployment.yaml",
        '            limits:\n              cpu: "2"\n',
        "            limits:\n",
        "limits.cpu",
    ),
    "readiness on healthz": ("deployment.yaml", "path: /readyz", "path: /healthz", "readinessProbe must GET /readyz"),
    "probe port": (
        "deployment.yaml",
        "path: /readyz\n              port: http",
        "path: /readyz\n              port: 8080",
        "port 8080",
    ),
    "short grace": (
        "deployment.yaml",
        "terminationGracePeriodSeconds: 75",
        "terminationGracePeriodSeconds: 60",
        "must exceed",
    ),
    "service selector": (
        "service.yaml",
        "app.kubernetes.io/component: server\n  ports",
        "app.kubernetes.io/component: web\n  ports",
        "does not select",
    ),
    "service port": ("service.yaml", "targetPort: http", "targetPort: 8080", "targetPort 8080"),
    "pdb selector": (
        "pdb.yaml",
        "      app.kubernetes.io/component: server\n",
        "      app.kubernetes.io/component: web\n",
        "not exactly one Deployment",
    ),
    "hpa target": (
        "hpa.yaml",
        "    name: agentrt\n  minReplicas",
        "    name: agentrt-typo\n  minReplicas",
        "scaleTargetRef",
    ),
    "hpa metric": ("hpa.yaml", "name: agentrt_jobs_queued", "name: agentrt_jobs_waiting", QUEUE_METRIC),
    "open ingress": (
        "networkpolicy.yaml",
        "- port: 8000\n          protocol: TCP\n    # Prom",
        "- port: 22\n          protocol: TCP\n    # Prom",
        "opens [22]",
    ),
    "real-looking secret": (
        "secret.example.yaml",
        'OPENAI_API_KEY: "CHANGE-ME"',
        'OPENAI_API_KEY: "sk-proj-{fake}"',
        "real credential",
    ),
    "secret applied": (
        "kustomization.yaml",
        "  - namespace.yaml\n",
        "  - namespace.yaml\n  - secret.example.yaml\n",
        "placeholder API keys",
    ),
    "missing resource": (
        "kustomization.yaml",
        "  - pdb.yaml\n",
        "  - pdb.yaml\n  - ingress.yaml\n",
        "'ingress.yaml', which does not exist",
    ),
    "keda target": (
        "components/keda/scaledobject.yaml",
        "    name: agentrt\n  minReplicaCount",
        "    nam: agentrt\n  minReplicaCount",
        "scaleTargetRef.name",
    ),
    "keda trigger": ("components/keda/scaledobject.yaml", '        threshold: "10"\n', "", "lacks ['threshold']"),
    "config map name": (
        "configmap.yaml",
        "name: agentrt-config",
        "name: agentrt-settings",
        "ConfigMap 'agentrt-config'",
    ),
}


def broken_copy(tmp_path: Path, file: str, text: str, replacement: str) -> Path:
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root)
    path = root / file
    source = path.read_text()
    assert source.count(text) == 1, f"the breakage's text must occur once in {file}: {text!r}"
    # A real-looking key is built here, never written in the test's source.
    path.write_text(source.replace(text, replacement.replace("{fake}", "Ab3d" * 12)))
    return root


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_a_broken_copy_fails(tmp_path: Path, breakage: str) -> None:
    file, text, replacement, expected = BREAKAGES[breakage]
    problems = all_problems(broken_copy(tmp_path, file, text, replacement))
    assert any(expected in p for p in problems), problems


def test_the_real_folder_has_no_problems() -> None:
    assert all_problems(K8S) == []


# ---- kubectl kustomize --------------------------------------------------------------------------


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl is not installed: CI must build the kustomization (kubectl kustomize)")
        pytest.skip("kubectl is not installed")
    return found


def kustomize(folder: Path) -> list[Manifest]:
    done = subprocess.run([kubectl(), "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [Manifest("(built)", doc) for doc in yaml.safe_load_all(done.stdout) if doc is not None]


@pytest.fixture
def overlay(tmp_path: Path) -> Callable[[list[str]], Path]:
    """An overlay of a copy of the folder with the given components."""
    shutil.copytree(K8S, tmp_path / "k8s")

    def make(components: list[str]) -> Path:
        folder = tmp_path / "overlay"
        folder.mkdir(exist_ok=True)
        lines = ["resources: [../k8s]", f"components: [{', '.join('../k8s/components/' + c for c in components)}]"]
        (folder / "kustomization.yaml").write_text("\n".join(lines) + "\n")
        return folder

    return make


def check_built(built: list[Manifest]) -> None:
    assert schema_problems(built) == []
    assert pod_security_problems(built) == []
    assert server_problems(built) == []
    assert reference_problems([*built, *of_kind(load_manifests(K8S), "Secret")]) == []
    for m in built:
        if m.kind != "Namespace":
            assert dig(m.doc, "metadata", "namespace") == "agentrt", m


def test_the_kustomization_builds() -> None:
    built = kustomize(K8S)
    kinds = sorted(m.kind for m in built)
    assert kinds == sorted(
        [
            *("Namespace", "ServiceAccount", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget"),
            *("HorizontalPodAutoscaler", "NetworkPolicy"),
        ]
    )
    check_built(built)


def test_the_keda_component_replaces_the_hpa(overlay: Callable[[list[str]], Path]) -> None:
    built = kustomize(overlay(["keda"]))
    assert of_kind(built, "HorizontalPodAutoscaler") == []
    (scaled,) = of_kind(built, "ScaledObject")
    assert dig(scaled.doc, "spec", "scaleTargetRef", "name") == "agentrt"
    assert QUEUE_METRIC in dig(scaled.doc, "spec", "triggers", 0, "metadata", "query")
    check_built(built)


def test_the_worker_component_adds_workers_and_leaves_the_queue_to_them(
    overlay: Callable[[list[str]], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    built = kustomize(overlay(["worker"]))
    assert sorted(m.name for m in of_kind(built, "Deployment")) == ["agentrt", "agentrt-worker"]
    hpas = {m.name: m for m in of_kind(built, "HorizontalPodAutoscaler")}
    server_metrics = dig(hpas["agentrt"].doc, "spec", "metrics")
    assert [x["type"] for x in server_metrics] == ["Resource"]
    worker_metrics = dig(hpas["agentrt-worker"].doc, "spec", "metrics")
    assert [dig(x, "external", "metric", "name") for x in worker_metrics if x["type"] == "External"] == [QUEUE_METRIC]
    with_secret = [*built, *of_kind(load_manifests(K8S), "Secret")]
    assert schema_problems(built) == []
    assert pod_security_problems(built) == []
    assert worker_problems(built) == []
    assert reference_problems(with_secret) == []
    # The servers only take requests: no job worker loop of their own.
    (server,) = server_deployments(built)
    parsed = parse_cli(server, with_secret, monkeypatch)
    assert parsed is not None
    assert parsed[1]["workers"] == 0
