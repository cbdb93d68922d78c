#!/usr/bin/env python3
"""The facts scripts/check-deploy.sh asserts on what an operator installs, one line per fact.

Usage: check-deploy-facts.py kubernetes RENDERED.yaml...  (kubectl kustomize's output per overlay)
       check-deploy-facts.py compose deploy/compose.yaml
       check-deploy-facts.py dockerfile Dockerfile
       check-deploy-facts.py alerts deploy/prometheus/alerts.yaml
       check-deploy-facts.py references FILE...           (file names cited in comments exist)
       check-deploy-facts.py dashboard deploy/grafana/*.json
       check-deploy-facts.py runbook-base RENDERED.yaml BASE (an overlay rendered with runbooks.yaml's base set to BASE)

Prints "ok" or "FAILED" before each fact (with what broke it) and exits 1 if any failed. Each
fact is one defect of issue 40 that the files once had; the numbers it checks against are read
from the repository, not repeated here (the drain cap from the ConfigMap, the producer's flush
timeout from KafkaProducer.swift).
"""
import json
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNBOOK = "https://github.com/herald-push/herald/blob/main/docs/runbooks.md#"
# The consumers' close on SIGTERM (rd_kafka_consumer_close: the revoke's offset commit and the
# LeaveGroup, one request each; both consumers close at once once the group is cancelled) and
# the margin left before the kubelet's SIGKILL, in seconds.
CONSUMER_CLOSE_S = 10
MARGIN_S = 5

failures = 0


def fact(name, problems):
    """Prints one fact's line; `problems` is a list of what contradicts it (empty: it holds)."""
    global failures
    if problems:
        failures += 1
        print(f"FAILED  {name}")
        for problem in problems:
            print(f"        {problem}")
    else:
        print(f"ok      {name}")


def load(paths):
    documents = []
    for path in paths:
        with open(path) as f:
            documents += [(path, d) for d in yaml.safe_load_all(f) if d]
    return documents


def pod_specs(documents):
    """(where, pod spec) of every Deployment, Job and CronJob."""
    for path, d in documents:
        kind, name = d.get("kind"), d.get("metadata", {}).get("name")
        spec = d.get("spec", {})
        if kind == "Deployment" or kind == "Job":
            yield f"{path}: {kind} {name}", spec.get("template", {}).get("spec", {})
        elif kind == "CronJob":
            yield f"{path}: {kind} {name}", spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})


def by_kind(documents, kind):
    return [(p, d) for p, d in documents if d.get("kind") == kind]


def kubernetes(paths):
    documents = load(paths)
    # The renderings that install the members (an overlay's migrate/ holds only the Job).
    overlays = sorted({p for p, d in documents if d.get("kind") == "Deployment"})
    # The members' settings: the ConfigMap `herald` (herald-ledger holds only the ledger's retention).
    config_maps = {p: d for p, d in by_kind(documents, "ConfigMap") if re.fullmatch(r"herald(-[a-z0-9]{10})?", d["metadata"]["name"])}

    def config(path, key):
        return (config_maps.get(path) or {}).get("data", {}).get(key)

    # What each rendering must hold, so that no fact below holds only because nothing rendered.
    problems = []
    for path in paths:
        kinds = sorted(d.get("kind") for p, d in documents if p == path)
        wanted = ["Job", "ServiceAccount"] if "migrate" in os.path.basename(path) else [
            "ConfigMap", "Deployment", "NetworkPolicy", "NetworkPolicy", "PodDisruptionBudget",
            "PodMonitor", "PrometheusRule", "ScaledObject", "Service", "ServiceAccount",
        ]
        missing = [k for k in set(wanted) if kinds.count(k) < wanted.count(k)]
        if missing:
            problems.append(f"{path}: renders no {', '.join(sorted(missing))} (has {', '.join(kinds) or 'nothing'})")
    fact("each rendering holds what Herald's install needs", problems)

    # KEDA's operator resolves the brokers in its own namespace: short names fail there.
    problems = []
    scalers = by_kind(documents, "ScaledObject")
    for path, d in scalers:
        for trigger in d["spec"].get("triggers", []):
            servers = trigger.get("metadata", {}).get("bootstrapServers", "")
            for server in filter(None, servers.split(",")):
                host = server.rsplit(":", 1)[0]
                if len(host.split(".")) < 3:
                    problems.append(f"{path}: bootstrapServers {server}: not fully qualified")
            brokers = config(path, "HERALD_KAFKA_BROKERS")
            if servers != brokers:
                problems.append(f"{path}: KEDA's brokers {servers!r} are not HERALD_KAFKA_BROKERS {brokers!r}")
            group = trigger.get("metadata", {}).get("consumerGroup")
            if group != config(path, "HERALD_KAFKA_GROUP"):
                problems.append(f"{path}: KEDA watches group {group!r}, Herald's is {config(path, 'HERALD_KAFKA_GROUP')!r}")
    for path, d in config_maps.items():
        for server in (d.get("data", {}).get("HERALD_KAFKA_BROKERS") or "").split(","):
            if server and len(server.rsplit(":", 1)[0].split(".")) < 3:
                problems.append(f"{path}: HERALD_KAFKA_BROKERS {server}: not fully qualified")
    if not scalers:
        problems.append("no ScaledObject rendered")
    fact("KEDA's brokers and group are the ConfigMap's, fully qualified", problems)

    problems = []
    for path, d in scalers:
        for trigger in d["spec"].get("triggers", []):
            policy = trigger.get("metadata", {}).get("offsetResetPolicy")
            if policy != "earliest":
                problems.append(f"{path}: offsetResetPolicy {policy!r} (KEDA's default is latest; Herald starts new groups at earliest)")
    fact("KEDA counts a partition without a committed offset from the earliest offset", problems)

    problems = []
    for path, d in scalers:
        spec = d["spec"]
        if "cooldownPeriod" in spec and spec.get("minReplicaCount", 0) > 0:
            problems.append(f"{path}: cooldownPeriod does nothing with minReplicaCount {spec['minReplicaCount']}")
        behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior", {})
        down = behavior.get("scaleDown", {})
        pods = [p for p in down.get("policies", []) if p.get("type") == "Pods"]
        if not pods or down.get("stabilizationWindowSeconds", 0) < 60:
            problems.append(f"{path}: no scale-down policy in advanced.horizontalPodAutoscalerConfig.behavior.scaleDown: {down!r}")
        for p in pods:
            if p.get("value", 0) > 4:
                problems.append(f"{path}: scale-down removes {p['value']} members per {p.get('periodSeconds')} s")
    fact("scaling down removes a few members at a time, after a stabilisation window", problems)

    # KEDA counts records (events), not notifications: the threshold is derived from the events
    # one member clears per second and the backlog an urgent event may wait behind, both stated.
    problems = []
    for path, d in scalers:
        annotations = d.get("metadata", {}).get("annotations", {})
        rate, seconds = annotations.get("herald.dev/events-per-second-per-member"), annotations.get("herald.dev/urgent-backlog-seconds")
        if rate is None or seconds is None:
            problems.append(f"{path}: no herald.dev/events-per-second-per-member and herald.dev/urgent-backlog-seconds to derive lagThreshold from")
            continue
        for trigger in d["spec"].get("triggers", []):
            threshold = int(trigger.get("metadata", {}).get("lagThreshold", 0))
            if threshold != int(rate) * int(seconds):
                problems.append(f"{path}: lagThreshold {threshold} is not {rate} events/s × {seconds} s")
    fact("KEDA's lag threshold is derived from a member's events per second and the urgent backlog", problems)

    # A migration that fails keeps each attempt's pod and log, and does not retry a configuration
    # error; GitOps controllers run the Job before the members and recreate it per release.
    problems = []
    for path, d in documents:
        if d.get("kind") not in ("Job", "CronJob"):
            continue
        job = d["spec"] if d["kind"] == "Job" else d["spec"]["jobTemplate"]["spec"]
        name = f"{path}: {d['kind']} {d['metadata']['name']}"
        if job["template"]["spec"].get("restartPolicy") != "Never":
            problems.append(f"{name}: restartPolicy {job['template']['spec'].get('restartPolicy')!r}: a retry in the same pod loses the failed attempt's log")
        if not any(2 in r.get("onExitCodes", {}).get("values", []) and r.get("action") == "FailJob" for r in job.get("podFailurePolicy", {}).get("rules", [])):
            problems.append(f"{name}: no podFailurePolicy failing the Job on a configuration error (exit status 2)")
        if d["kind"] == "Job":
            annotations = d["metadata"].get("annotations", {})
            if annotations.get("argocd.argoproj.io/hook") != "PreSync" or annotations.get("kustomize.toolkit.fluxcd.io/force") != "enabled":
                problems.append(f"{name}: no Argo CD PreSync hook or Flux force annotation")
    fact("migrations keep each failed attempt's log, fail at once on a configuration error, and run first under GitOps", problems)

    # Each member opens up to HERALD_POSTGRES_POOL_SIZE connections and housekeeping 2 more; KEDA
    # may run maxReplicaCount of them beside the migration Job: the server must admit them all.
    problems = []
    for path, d in scalers:
        declared = d.get("metadata", {}).get("annotations", {}).get("herald.dev/postgres-max-connections")
        if declared is None:
            problems.append(f"{path}: no herald.dev/postgres-max-connections annotation states the server's max_connections")
            continue
        pool = int(config(path, "HERALD_POSTGRES_POOL_SIZE") or default_pool_size())
        members = d["spec"].get("maxReplicaCount", 100)
        need = members * (pool + HOUSEKEEPING_CONNECTIONS) + default_pool_size() + SUPERUSER_RESERVED
        if need > int(declared):
            problems.append(
                f"{path}: {members} members × ({pool} + {HOUSEKEEPING_CONNECTIONS}) + the migration's {default_pool_size()} "
                f"+ {SUPERUSER_RESERVED} reserved = {need} connections > max_connections {declared}"
            )
    if not scalers:
        problems.append("no ScaledObject rendered")
    fact("the most members KEDA may run stay within PostgreSQL's stated max_connections", problems)

    problems = []
    for path, d in scalers:
        spec = d["spec"]
        up = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior", {}).get("scaleUp", {})
        policies = up.get("policies", [])
        if not policies or up.get("stabilizationWindowSeconds", 0) < 30 or any(p.get("type") != "Pods" or p.get("value", 0) > 4 for p in policies):
            problems.append(f"{path}: scale-up not bounded to a few members at a time after a window: {up!r}")
        fallback = spec.get("fallback", {})
        if not fallback or not spec.get("minReplicaCount", 0) <= fallback.get("replicas", -1) <= spec.get("maxReplicaCount", 0):
            problems.append(f"{path}: no fallback member count between min and max for when KEDA cannot read the lag: {fallback!r}")
    with open(os.path.join(ROOT, "docs/runbooks.md")) as f:
        if "autoscaling.keda.sh/paused-replicas" not in f.read():
            problems.append("docs/runbooks.md: does not say how to pause the autoscaling during an incident")
    fact("scaling up adds a few members at a time, falls back to a fixed count, and can be paused", problems)

    problems = []
    for path, d in by_kind(documents, "Deployment"):
        if d["spec"].get("minReadySeconds", 0) < 5:
            problems.append(f"{path}: minReadySeconds {d['spec'].get('minReadySeconds', 0)}: a member failing right after its first probe does not halt the rollout")
        labels = d["spec"]["template"].get("metadata", {}).get("labels", {})
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/part-of"):
            if key not in labels:
                problems.append(f"{path}: the pod template has no {key} label")
        priority = d["spec"]["template"]["spec"].get("priorityClassName")
        if not priority or not any(p == path and c.get("kind") == "PriorityClass" and c["metadata"]["name"] == priority for p, c in documents):
            problems.append(f"{path}: the members have no PriorityClass of their own ({priority!r}): evicted like any pod under pressure")
    fact("a rollout waits for each new member to stay ready; pods carry the recommended labels and a PriorityClass", problems)

    # The service's role may not change the schema (docs/kubernetes.md): in every install the
    # ledger's day partitions are kept by a scheduled `herald migrate`, and the members leave them.
    problems = []
    for path in overlays:
        if config(path, "HERALD_HOUSEKEEPING_PARTITIONS") != "false":
            problems.append(f"{path}: the members keep the ledger's partitions (HERALD_HOUSEKEEPING_PARTITIONS not false) with a role that may not")
        cronjobs = [d for p, d in documents if p == path and d.get("kind") == "CronJob"]
        runs = [c for d in cronjobs for c in d["spec"]["jobTemplate"]["spec"]["template"]["spec"].get("containers", []) if c.get("args", [""])[0] == "migrate"]
        if not runs:
            problems.append(f"{path}: no CronJob runs `herald migrate`: new days stop three days after the last migration")
    fact("every install keeps the ledger's day partitions with the migration role, on a schedule", problems)

    # `herald migrate` (the Job, the partition CronJob) drops ledger days by the retention it is
    # given: the members' and the migrations' of one install must be the same setting, never the
    # default on one side and the operator's value on the other.
    problems = []
    all_config_maps = {(p, d["metadata"]["name"]): d.get("data", {}) for p, d in by_kind(documents, "ConfigMap")}

    def env_value(path, container, key):
        for variable in container.get("env", []):
            if variable["name"] == key:
                ref = variable.get("valueFrom", {}).get("configMapKeyRef")
                return variable.get("value") if ref is None else all_config_maps.get((path, ref["name"]), {}).get(ref["key"])
        found = None
        for source in container.get("envFrom", []):
            ref = source.get("configMapRef")
            if ref:
                found = all_config_maps.get((path, ref["name"]), {}).get(key, found)
        return found

    installs = {}
    for where, pod in pod_specs(documents):
        path = where.split(": ")[0]
        install = os.path.basename(path).removesuffix(".yaml").removesuffix("-migrate")
        for container in pod.get("containers", []):
            if container.get("image", "").startswith(("herald", "registry")) and container.get("args", [""])[0] in ("run", "migrate"):
                installs.setdefault(install, {})[f"{where} ({container['args'][0]})"] = env_value(path, container, "HERALD_LEDGER_RETENTION_HOURS")
    for install, values in sorted(installs.items()):
        if not any(w.endswith("(migrate)") for w in values):
            problems.append(f"{install}: no `herald migrate` rendered with the members")
        for where, value in sorted(values.items()):
            if value is None:
                problems.append(f"{where}: HERALD_LEDGER_RETENTION_HOURS not set (the default 168 h, whatever the others run with)")
        if len(set(values.values())) > 1:
            problems.append(f"{install}: HERALD_LEDGER_RETENTION_HOURS differs: {sorted(values.items())}")
    fact("the members and `herald migrate` keep the delivery ledger for the same retention", problems)

    problems = []
    for where, pod in pod_specs(documents):
        secret_volumes = {v["name"] for v in pod.get("volumes", []) if "secret" in v}
        for v in pod.get("volumes", []):
            if "secret" in v and v["secret"].get("items"):
                problems.append(f"{where}: Secret volume {v['name']} mounts only its `items:`: keys added later never appear")
        for c in pod.get("containers", []):
            for m in c.get("volumeMounts", []):
                if m["name"] in secret_volumes and m.get("subPath"):
                    problems.append(f"{where}: {m['name']} mounted with subPath, which the kubelet never updates")
    fact("Secret volumes are mounted whole (no items:, no subPath), so new keys appear", problems)

    problems = []
    for where, pod in pod_specs(documents):
        for c in pod.get("containers", []):
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if probe in c and c[probe].get("timeoutSeconds", 1) < 3:
                    problems.append(f"{where}: {probe} timeoutSeconds {c[probe].get('timeoutSeconds', '1 (default)')}; /health/ready may wait 2 s for PostgreSQL")
    if not any("readinessProbe" in c for _, pod in pod_specs(documents) for c in pod.get("containers", [])):
        problems.append("no readiness probe rendered")
    for where, pod in pod_specs(documents):
        for c in pod.get("containers", []):
            startup, liveness = c.get("startupProbe"), c.get("livenessProbe")
            if startup and liveness and startup.get("httpGet", {}).get("path") == liveness.get("httpGet", {}).get("path"):
                problems.append(f"{where}: the startup probe asks what the liveness probe asks ({startup['httpGet']['path']}): it delays nothing")
    fact("every probe waits at least 3 s for an answer, and none only repeats another", problems)

    flush = flush_timeout_s()
    problems = []
    for path, d in by_kind(documents, "Deployment"):
        grace = d["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        drain = config(path, "HERALD_SHUTDOWN_GRACE_S")
        if drain is None:
            problems.append(f"{path}: the ConfigMap sets no HERALD_SHUTDOWN_GRACE_S")
            continue
        need = int(drain) + flush + CONSUMER_CLOSE_S + MARGIN_S
        if grace < need:
            problems.append(
                f"{path}: terminationGracePeriodSeconds {grace} < drain cap {drain} + producer flush {flush} "
                f"+ consumers' close {CONSUMER_CLOSE_S} + margin {MARGIN_S} = {need}"
            )
    fact(f"the grace period covers the drain cap, the producer's flush ({flush} s), the consumers' close and a margin", problems)

    problems = []
    for where, pod in pod_specs(documents):
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            image = c.get("image", "")
            if not re.search(r"@sha256:[0-9a-f]{64}$", image):
                problems.append(f"{where}: image {image!r} is not pinned by digest")
            if re.search(r":latest(@|$)", image) or ("@" not in image and ":" not in image.rsplit("/", 1)[-1]):
                problems.append(f"{where}: image {image!r} floats (latest)")
    fact("every image is pinned by digest, none is `latest`", problems)

    problems = []
    pdbs = by_kind(documents, "PodDisruptionBudget")
    for path, d in pdbs:
        if d["spec"].get("unhealthyPodEvictionPolicy") != "AlwaysAllow":
            problems.append(f"{path}: unhealthyPodEvictionPolicy {d['spec'].get('unhealthyPodEvictionPolicy')!r}: a drain stalls while every member is unready")
    if not pdbs:
        problems.append("no PodDisruptionBudget rendered")
    fact("the PodDisruptionBudget lets a drain evict unready members (AlwaysAllow)", problems)

    problems = []
    for path in overlays:
        names = [d["metadata"]["name"] for p, d in documents if p == path and d.get("kind") == "ConfigMap"]
        deployments = [d for p, d in documents if p == path and d.get("kind") == "Deployment"]
        for d in deployments:
            refs = [e["configMapRef"]["name"] for c in d["spec"]["template"]["spec"]["containers"] for e in c.get("envFrom", []) if "configMapRef" in e]
            for ref in refs:
                if ref not in names or not re.fullmatch(r"herald(-ledger)?-[a-z0-9]{10}", ref):
                    problems.append(f"{path}: the Deployment reads ConfigMap {ref!r}, not one named by its content's hash: a config change restarts no pod")
    fact("the ConfigMap's name carries its content's hash, so a change rolls the pods", problems)

    problems = []
    accounts = {(p, d["metadata"]["name"]): d for p, d in by_kind(documents, "ServiceAccount")}
    for where, pod in pod_specs(documents):
        path = where.split(":")[0]
        account = accounts.get((path, pod.get("serviceAccountName"))) if path in overlays else None
        if pod.get("automountServiceAccountToken") is not False:
            problems.append(f"{where}: the pod mounts a service account token")
        if pod.get("serviceAccountName") in (None, "default"):
            problems.append(f"{where}: runs as the namespace's default service account")
        if account is not None and account.get("automountServiceAccountToken") is not False:
            problems.append(f"{path}: ServiceAccount {pod.get('serviceAccountName')} mounts its token by default")
    fact("pods run as their own service account, without an API token", problems)

    problems = []
    for path, d in by_kind(documents, "Deployment"):
        keys = {c.get("topologyKey") for c in d["spec"]["template"]["spec"].get("topologySpreadConstraints", [])}
        for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone"):
            if key not in keys:
                problems.append(f"{path}: no topology spread over {key}")
    fact("the members spread across nodes and zones", problems)

    problems = []
    for where, pod in pod_specs(documents):
        for c in pod.get("containers", []):
            resources = c.get("resources", {})
            if not resources.get("requests", {}).get("cpu") or not resources.get("requests", {}).get("memory") or not resources.get("limits", {}).get("memory"):
                problems.append(f"{where}: container {c['name']} without CPU and memory requests and a memory limit")
            elif resources["requests"]["memory"] != resources["limits"]["memory"]:
                problems.append(f"{where}: container {c['name']} requests {resources['requests']['memory']} of memory below its limit {resources['limits']['memory']}: evicted first under pressure")
    fact("every container (the migration's too) has requests and a memory limit, memory requested up to its limit", problems)

    problems = []
    for path in overlays:
        policies = [d for p, d in documents if p == path and d.get("kind") == "NetworkPolicy"]
        herald = [d for d in policies if d["spec"].get("podSelector", {}).get("matchLabels", {}).get("app") == "herald"]
        migrate = [d for d in policies if d["spec"].get("podSelector", {}).get("matchLabels", {}).get("app") == "herald-migrate"]
        if not herald or not migrate:
            problems.append(f"{path}: no NetworkPolicy for app=herald and app=herald-migrate")
            continue
        spec = herald[0]["spec"]
        if set(spec.get("policyTypes", [])) != {"Ingress", "Egress"}:
            problems.append(f"{path}: the policy does not restrict both directions")
        for rule in spec.get("ingress", []):
            ports = {p.get("port") for p in rule.get("ports", [])}
            sources = rule.get("from", [])
            if ports != {8080} or not sources or any(
                s.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name") != "monitoring" for s in sources
            ):
                problems.append(f"{path}: ingress other than 8080 from the namespace monitoring: {rule}")
        egress_ports = {p.get("port") for r in spec.get("egress", []) for p in r.get("ports", [])}
        if any(not r.get("to") for r in spec.get("egress", [])):
            problems.append(f"{path}: an egress rule open to every destination")
        brokers = config(path, "HERALD_KAFKA_BROKERS") or ""
        wanted = {53, 443, 5432} | {int(s.rsplit(":", 1)[1]) for s in brokers.split(",") if ":" in s}
        if egress_ports != wanted | {2197}:
            problems.append(f"{path}: egress ports {sorted(egress_ports)}, expected DNS, APNs (443, 2197), Kafka and PostgreSQL: {sorted(wanted | {2197})}")
    fact("NetworkPolicy: in 8080 from monitoring only; out DNS, APNs, Kafka and PostgreSQL only", problems)

    # A dual-stack cluster reaches APNs, FCM and the push services over IPv6 too.
    problems = []
    for path in overlays:
        herald = [d for p, d in documents if p == path and d.get("kind") == "NetworkPolicy" and d["metadata"]["name"] == "herald"]
        rules = herald[0]["spec"].get("egress", []) if herald else []
        for port in (443, 2197):
            if not any(":" in t.get("ipBlock", {}).get("cidr", "") for r in rules if port in {p.get("port") for p in r.get("ports", [])} for t in r.get("to", [])):
                problems.append(f"{path}: no IPv6 egress on port {port}")
    fact("NetworkPolicy: APNs, FCM and the push services reachable over IPv6 as well", problems)

    problems = []
    monitors = by_kind(documents, "PodMonitor") + by_kind(documents, "ServiceMonitor")
    rules = by_kind(documents, "PrometheusRule")
    for path in overlays:
        if not any(p == path for p, _ in monitors):
            problems.append(f"{path}: no PodMonitor or ServiceMonitor (the Prometheus Operator ignores prometheus.io annotations)")
        if not any(p == path for p, _ in rules):
            problems.append(f"{path}: no PrometheusRule")
    for path, d in monitors:
        if d["spec"].get("jobLabel") != "app":
            problems.append(f"{path}: job label not taken from app (the alerts select job=\"herald\")")
    for path, d in rules:
        problems += alert_problems(path, d["spec"])
    fact("a PodMonitor scrapes the members; the alerts are a PrometheusRule with runbooks and an absent() alert", problems)


def alert_problems(path, spec):
    problems = []
    alerts = [r for g in spec.get("groups", []) for r in g.get("rules", []) if "alert" in r]
    for r in alerts:
        url = r.get("annotations", {}).get("runbook_url")
        if url != RUNBOOK + r["alert"].lower():
            problems.append(f"{path}: {r['alert']}: runbook_url {url!r}, expected {RUNBOOK + r['alert'].lower()}")
    runbooks = os.path.join(os.getcwd(), "docs/runbooks.md")
    if os.path.exists(runbooks):
        with open(runbooks) as f:
            headings = set(re.findall(r"^## (\S+)\s*$", f.read(), re.M))
        for r in alerts:
            if r["alert"] not in headings:
                problems.append(f"{path}: {r['alert']}: docs/runbooks.md has no '## {r['alert']}' section for its runbook_url")
    if not any("absent(" in r.get("expr", "") for r in alerts):
        problems.append(f"{path}: no alert fires when every instance is gone (absent(up...))")
    if not any(re.search(r"\bup\{[^}]*\}\s*==\s*0", r.get("expr", "")) for r in alerts):
        problems.append(f"{path}: no alert fires when a target is down (up == 0)")
    return problems


def alerts(path):
    with open(path) as f:
        fact(f"every alert in {path} has its runbook_url; absent() and up == 0 alerts exist", alert_problems(path, yaml.safe_load(f)))


def runbook_base(args):
    """Every runbook_url of an overlay rendered with its runbooks.yaml naming `base` starts with
    that base (components/runbook-links), and the local-config ConfigMap stays out of the output."""
    path, base = args
    problems = []
    documents = load([path])
    rules = [r for _, d in by_kind(documents, "PrometheusRule") for g in d["spec"].get("groups", []) for r in g.get("rules", []) if "alert" in r]
    if not rules:
        problems.append(f"{path}: no PrometheusRule with alerts")
    for r in rules:
        url = r.get("annotations", {}).get("runbook_url")
        if url != f"{base}#{r['alert'].lower()}":
            problems.append(f"{path}: {r['alert']}: runbook_url {url!r}, expected {base}#{r['alert'].lower()}")
    if any(d.get("kind") == "ConfigMap" and d.get("metadata", {}).get("name") == "herald-runbooks" for _, d in documents):
        problems.append(f"{path}: the herald-runbooks ConfigMap (local-config) is rendered for the cluster")
    fact(f"an overlay's runbooks.yaml sets every alert's runbook base ({base})", problems)


def flush_timeout_s():
    """KafkaProducer's default flush timeout, in seconds, as the source declares it."""
    with open(os.path.join(ROOT, "Sources/KafkaTransport/KafkaProducer.swift")) as f:
        match = re.search(r"flushTimeout: Duration = \.seconds\((\d+)\)", f.read())
    if not match:
        sys.exit("KafkaProducer.swift: no `flushTimeout: Duration = .seconds(N)` default to check the grace period against")
    return int(match.group(1))


def default_pool_size():
    """PostgresURL's default pool size, as the source declares it."""
    with open(os.path.join(ROOT, "Sources/HeraldService/Configuration/PostgresURL.swift")) as f:
        match = re.search(r"static let defaultPoolSize = (\d+)", f.read())
    if not match:
        sys.exit("PostgresURL.swift: no `defaultPoolSize = N` to count the connection budget with")
    return int(match.group(1))


def default_drain_s():
    """Herald's default drain cap (HERALD_SHUTDOWN_GRACE_S), in seconds, as the source declares it."""
    with open(os.path.join(ROOT, "Sources/HeraldService/Configuration/HeraldConfiguration.swift")) as f:
        match = re.search(r"defaultShutdownGracePeriod: Duration = \.seconds\((\d+)\)", f.read())
    if not match:
        sys.exit("HeraldConfiguration.swift: no `defaultShutdownGracePeriod: Duration = .seconds(N)` to check compose's grace against")
    return int(match.group(1))


# Housekeeping's own PostgreSQL pool per member, and PostgreSQL's superuser_reserved_connections.
HOUSEKEEPING_CONNECTIONS = 2
SUPERUSER_RESERVED = 3

# Herald's own services in the compose file, which must run as the Kubernetes manifests do.
HERALD_SERVICES = ("herald", "herald-migrate", "mock-apns", "shared-volume")


def compose(path):
    with open(path) as f:
        services = yaml.safe_load(f)["services"]

    problems = []
    for name, service in services.items():
        for port in service.get("ports", []):
            if not str(port).startswith("127.0.0.1:"):
                problems.append(f"{name}: port {port} is published on every address of the host")
    fact("compose publishes ports on 127.0.0.1 only", problems)

    def environment(service):
        env = service.get("environment", {})
        if isinstance(env, list):
            env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
        return env

    problems = []
    grafana = environment(services.get("grafana", {}))
    if str(grafana.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "true" and grafana.get("GF_AUTH_ANONYMOUS_ORG_ROLE", "Viewer") != "Viewer":
        problems.append(f"grafana: anonymous users get the role {grafana.get('GF_AUTH_ANONYMOUS_ORG_ROLE')}")
    if "GF_SECURITY_ADMIN_PASSWORD" in grafana:
        problems.append("grafana: the admin password is written in the file")
    if "GF_SECURITY_ADMIN_PASSWORD__FILE" not in grafana:
        problems.append("grafana: the admin keeps the default password admin (no GF_SECURITY_ADMIN_PASSWORD__FILE)")
    fact("compose's Grafana has no anonymous Admin and no default admin password", problems)

    problems = []
    for name, service in services.items():
        for key, value in environment(service).items():
            if value is None:
                continue
            if re.search(r"PASSWORD$", key):
                problems.append(f"{name}: {key} is written in the file")
            if re.search(r"://[^/@:]+:[^/@]+@", str(value)):
                problems.append(f"{name}: {key} holds a password in a URL")
    fact("compose writes no password: they come from the generated env files", problems)

    problems = []
    for name, service in services.items():
        image = service.get("image", "")
        if "build" in service:
            continue
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        if "@sha256:" not in image and (not tag or tag == "latest" or not re.match(r"v?\d+\.\d+", tag)):
            problems.append(f"{name}: image {image!r} floats (pin major.minor at least, or a digest)")
    fact("compose's third-party images are pinned (no latest, no bare major)", problems)

    problems = []
    for name in HERALD_SERVICES:
        service = services.get(name)
        if service is None:
            problems.append(f"{name}: missing")
            continue
        if service.get("read_only") is not True:
            problems.append(f"{name}: root filesystem writable (read_only: true, as Kubernetes' readOnlyRootFilesystem)")
        if "ALL" not in service.get("cap_drop", []):
            problems.append(f"{name}: capabilities not dropped (cap_drop: [ALL])")
        if "no-new-privileges:true" not in service.get("security_opt", []):
            problems.append(f"{name}: no security_opt no-new-privileges:true")
    fact("Herald's compose services run read-only, without capabilities or new privileges", problems)

    problems = []
    herald = services.get("herald", {})
    drain = int(environment(herald).get("HERALD_SHUTDOWN_GRACE_S") or default_drain_s())
    need = drain + flush_timeout_s() + CONSUMER_CLOSE_S + MARGIN_S
    grace = str(herald.get("stop_grace_period", "10s"))
    match = re.fullmatch(r"(\d+)s", grace)
    if not match or int(match.group(1)) < need:
        problems.append(f"herald: stop_grace_period {grace} < drain {drain} + flush + close + margin = {need} s")
    if herald.get("restart") not in ("always", "unless-stopped"):
        problems.append(f"herald: restart {herald.get('restart')!r}: a graceful stop for a changed TLS file (exit 0) would leave it down")
    fact("compose lets Herald drain before it kills it (stop_grace_period), and starts it again after a clean exit", problems)

    problems = []
    mock = services.get("mock-apns", {})
    build = mock.get("build", {})
    if not isinstance(build, dict) or build.get("target") != "mock-apns":
        problems.append(f"mock-apns: not built from the Dockerfile's mock-apns target: {build!r}")
    if mock.get("image", "").split(":")[0] == services.get("herald", {}).get("image", "").split(":")[0]:
        problems.append("mock-apns: runs Herald's production image")
    fact("compose runs the mock APNs from its own image", problems)


def dockerfile(path):
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if not l.lstrip().startswith("#")]
    stages, current = [], None
    for line in lines:
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if match:
            current = {"name": match.group(2), "lines": []}
            stages.append(current)
        elif current is not None:
            current["lines"].append(line)
    problems = []
    final = stages[-1] if stages else {"name": None, "lines": []}
    if any("mock-apns" in l for l in final["lines"]):
        problems.append(f"{path}: the final stage ({final['name'] or 'unnamed'}, the default target) ships the mock APNs")
    if not any(s["name"] == "mock-apns" for s in stages):
        problems.append(f"{path}: no mock-apns stage to build the mock's own image from")
    fact("the production image (the Dockerfile's default target) has no mock APNs", problems)

    problems = []
    labels = " ".join(final["lines"])
    if not re.search(r"ARG\s+REVISION", labels) or "org.opencontainers.image.revision=\"${REVISION}\"" not in labels:
        problems.append(f"{path}: the final stage does not label org.opencontainers.image.revision from the build argument REVISION")
    if "HERALD_BUILD_REVISION=\"${REVISION}\"" not in labels:
        problems.append(f"{path}: the final stage does not give Herald its revision (ENV HERALD_BUILD_REVISION), so herald_build_info cannot say it")
    fact("the production image names the commit it was built from (OCI revision label, herald_build_info)", problems)


def references(paths):
    """File names cited in the comments of deploy files exist (configmap.yaml once cited a
    secret.yaml that was never there)."""
    root = os.getcwd()  # the repository's root (check-deploy.sh runs from there)
    known = set()
    for folder, _, files in os.walk(root):
        if "/." in folder[len(root):]:
            continue
        for name in files:
            known.add(os.path.relpath(os.path.join(folder, name), root))
            known.add(name)
    # Files the operator puts into Secrets, which the comments name too.
    known |= {"credentials.json", "herald.yaml", "service-account.json"}
    problems = []
    for path in paths:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if "#" not in line:
                    continue
                comment = line[line.index("#"):]
                for cited in re.findall(r"[\w./-]+\.(?:yaml|yml|json|sh|md|swift|Dockerfile|env)\b", comment):
                    cited = cited.rstrip(".")
                    if cited.startswith("//"):
                        continue  # a URL's path (https://host/...), not a file of the repository
                    here = os.path.normpath(os.path.join(os.path.dirname(path), cited))
                    if cited not in known and os.path.basename(cited) not in known and not os.path.exists(here):
                        problems.append(f"{path}:{number}: cites {cited}, which does not exist")
    fact("every file the deploy files' comments cite exists", problems)


# The families with a `lane` label that the dashboard shows.
LANED_FAMILIES = (
    "herald_results_total", "herald_messages_consumed_total", "herald_in_flight_messages", "herald_assigned_partitions",
    "herald_paused_partitions", "herald_consumer_lag", "herald_committed_offset", "herald_notification_duration_seconds_bucket",
    "herald_notification_ready_duration_seconds_bucket",
)


def dashboard(paths):
    """Every query of the Grafana dashboards can be narrowed to one job and one namespace, and
    the lane-labelled families to one lane (the dashboard's variables)."""
    problems = []
    for path in paths:
        with open(path) as f:
            board = json.load(f)
        variables = {v.get("name") for v in board.get("templating", {}).get("list", [])}
        for name in ("job", "namespace", "lane"):
            if name not in variables:
                problems.append(f"{path}: no ${name} variable")
        for panel in board.get("panels", []):
            for target in panel.get("targets", []):
                for family, selector in re.findall(r"(herald_[a-z_]+)(\{[^}]*\})?", target.get("expr", "")):
                    if 'job=~"$job"' not in selector or 'namespace=~"$namespace"' not in selector:
                        problems.append(f"{path}: {panel.get('title')!r}: {family} not filtered by $job and $namespace")
                    if family in LANED_FAMILIES and "lane=" not in selector:
                        problems.append(f"{path}: {panel.get('title')!r}: {family} not filtered by $lane")
    fact("the dashboard filters every query by job and namespace, and by lane where there is one", problems)


def main():
    mode, paths = sys.argv[1], sys.argv[2:]
    {"kubernetes": kubernetes, "compose": lambda p: compose(p[0]), "dockerfile": lambda p: dockerfile(p[0]), "references": references, "alerts": lambda p: alerts(p[0]), "dashboard": dashboard, "runbook-base": runbook_base}[mode](paths)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
