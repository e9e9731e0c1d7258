"""The chart lints cleanly and renders valid, hardened, least-privilege manifests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest

from pdserve.operator.rbac import LEASE_RULES, RULES

from .conftest import BAD_VALUES, CHART_DIR, GOOD_VALUES, load_values, of_kind, render

KUBE_VERSION = "1.30.0"
MONITORING_KINDS = {"PodMonitor", "PrometheusRule"}

# The parts of the Prometheus Operator CRDs (monitoring.coreos.com/v1) the chart uses;
# kubernetes-validate only knows built-in kinds.
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_META = {"type": "object", "required": ["name", "namespace"], "properties": {"name": {"type": "string"}, "labels": _LABELS}}
_RELABEL = {  # monitoring.coreos.com/v1 RelabelConfig, the fields the chart uses
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
        "action": {"enum": ["replace", "keep", "drop", "labelmap", "labeldrop", "labelkeep", "hashmod"]},
    },
}
MONITORING_SCHEMAS: dict[str, dict[str, Any]] = {
    "PodMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "podMetricsEndpoints"],
                "properties": {
                    "namespaceSelector": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}},
                    },
                    "selector": {"type": "object", "properties": {"matchLabels": _LABELS, "matchExpressions": {"type": "array"}}},
                    "podMetricsEndpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["port"],
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string", "pattern": "^/"},
                                "honorLabels": {"type": "boolean"},
                                "interval": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                                "relabelings": {"type": "array", "items": _RELABEL},
                                "metricRelabelings": {"type": "array", "items": _RELABEL},
                            },
                        },
                    },
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["groups"],
                "properties": {
                    "groups": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "properties": {
                                "rules": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["expr"],
                                        "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                        "properties": {
                                            "alert": {"type": "string"},
                                            "record": {"type": "string"},
                                            "expr": {"type": "string", "minLength": 1},
                                            "for": {"type": "string"},
                                            "labels": _LABELS,
                                            "annotations": _LABELS,
                                        },
                                    },
                                }
                            },
                        },
                    }
                },
            },
        },
    },
}

CASES = [pytest.param({}, id="defaults")] + [pytest.param(load_values(p), id=p.stem) for p in GOOD_VALUES]


def _validate(obj: dict[str, Any]) -> None:
    body = {k: v for k, v in obj.items() if k != "_template"}
    if obj["kind"] in MONITORING_KINDS:
        jsonschema.validate(body, MONITORING_SCHEMAS[obj["kind"]])
    else:
        kubernetes_validate.validate(body, KUBE_VERSION, strict=True)


@pytest.mark.parametrize("values", CASES)
def test_lint_is_clean_in_strict_mode(values: dict[str, Any]) -> None:
    report = helm.lint(CHART_DIR, values, strict=True, namespace="pdserve-system", kube_version="v1.30.0")
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


@pytest.mark.parametrize("values", CASES)
def test_every_rendered_manifest_is_valid(chart: helm.Chart, values: dict[str, Any]) -> None:
    objects = render(chart, values)
    assert of_kind(objects, "Deployment"), "the operator Deployment is always rendered"
    for obj in objects:
        try:
            _validate(obj)
        except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as e:
            pytest.fail(f"{obj['_template']}: {obj['kind']}/{obj['metadata']['name']} is invalid: {e.message} at {list(e.path)}")


@pytest.mark.parametrize("values", CASES)
def test_operator_pod_is_hardened(chart: helm.Chart, values: dict[str, Any]) -> None:
    (deploy,) = of_kind(render(chart, values), "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsUser"] != 0
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["capabilities"]["drop"] == ["ALL"], c["name"]
        assert "add" not in sc["capabilities"], c["name"]
        assert c["resources"]["requests"] and c["resources"]["limits"], c["name"]
        assert c["livenessProbe"]["httpGet"]["port"] in {p["name"] for p in c["ports"]}
        assert c["readinessProbe"]["httpGet"]["port"] in {p["name"] for p in c["ports"]}
        assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"], "read-only root needs a writable /tmp"
    operator = next(c for c in pod["containers"] if c["name"] == "operator")
    assert operator["args"][0] == "operator"
    assert any(a.startswith("--liveness=http://0.0.0.0:") and a.endswith("/healthz") for a in operator["args"])


def test_the_planner_runs_inside_the_operator_and_is_configurable(chart: helm.Chart) -> None:
    values = {"planner": {"prometheusUrl": "http://prom.obs.svc:9090", "intervalSeconds": 20, "dryRun": True}}
    (deploy,) = of_kind(render(chart, values), "Deployment")
    # One process hosts every planner (a kopf daemon per resource): no second container.
    (operator,) = deploy["spec"]["template"]["spec"]["containers"]
    args = operator["args"]
    assert args[0] == "operator"
    assert "--prometheus-url=http://prom.obs.svc:9090" in args
    assert "--planner-interval=20" in args
    assert "--planner-dry-run" in args and "--no-planner" not in args
    assert "--planner-no-warm-start" not in args  # a planner that starts replays its history by default
    assert {"name": "metrics", "containerPort": 9091, "protocol": "TCP"} in operator["ports"]
    (deploy,) = of_kind(render(chart, {"planner": {"warmStart": False}}), "Deployment")
    cold = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    from pdserve.operator.cli import _parser  # the operator's own parser reads the flag the chart writes
    assert "--planner-no-warm-start" in cold and _parser().parse_args(cold[1:]).planner_no_warm_start
    (deploy,) = of_kind(render(chart, {"planner": {"enabled": False}}), "Deployment")
    (operator,) = deploy["spec"]["template"]["spec"]["containers"]
    assert "--no-planner" in operator["args"] and not any(a.startswith("--prometheus-url") for a in operator["args"])
    assert "metrics" not in {p["name"] for p in operator["ports"]}


def _lease_role(objects: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((r for r in of_kind(objects, "Role") if r["metadata"]["name"].endswith("-leader-election")), None)


def test_two_operators_are_safe_only_with_a_lease(chart: helm.Chart) -> None:
    objects = render(chart, {"operator": {"replicas": 2}})
    (deploy,) = of_kind(objects, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    # Only the Lease holder runs kopf, so old and new pods may overlap during a rollout.
    assert deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    (operator,) = deploy["spec"]["template"]["spec"]["containers"]
    assert "--lease-name=pds-pdserve" in operator["args"] and "--lease-namespace=pdserve-system" in operator["args"]
    assert "--lease-duration=15" in operator["args"] and "--lease-renew-deadline=10" in operator["args"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in operator["env"], "the Lease identity"
    # The Lease: get/create/update in the release namespace only, bound to the operator's ServiceAccount.
    role = _lease_role(objects)
    assert role is not None and role["metadata"]["namespace"] == "pdserve-system"
    assert _rule_set(role["rules"]) == _rule_set(LEASE_RULES)
    (binding,) = [b for b in of_kind(objects, "RoleBinding") if b["roleRef"]["name"] == role["metadata"]["name"]]
    assert binding["subjects"][0]["name"] == deploy["spec"]["template"]["spec"]["serviceAccountName"]
    # Without a Lease: one replica, never overlapping (Recreate); two are refused (bad_values).
    single = render(chart, {"operator": {"leaderElection": {"enabled": False}}})
    (deploy,) = of_kind(single, "Deployment")
    assert deploy["spec"]["strategy"]["type"] == "Recreate"
    assert "--no-leader-elect" in deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _lease_role(single) is None


def test_cluster_scope_binds_one_cluster_role(chart: helm.Chart) -> None:
    objects = render(chart)
    (role,) = of_kind(objects, "ClusterRole")
    (binding,) = of_kind(objects, "ClusterRoleBinding")
    (sa,) = of_kind(objects, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "pdserve-system"}]
    assert of_kind(objects, "Role") == [_lease_role(objects)], "only the Lease is namespaced"
    (deploy,) = of_kind(objects, "Deployment")
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    for c in deploy["spec"]["template"]["spec"]["containers"]:
        assert "--all-namespaces" in c["args"]


def test_namespace_scope_uses_roles_in_each_watched_namespace(chart: helm.Chart) -> None:
    objects = render(chart, {"operator": {"scope": "namespace", "watchNamespaces": ["team-a", "team-b"]}, "monitoring": {"podMonitors": True}})
    roles = [r for r in of_kind(objects, "Role") if r is not _lease_role(objects)]
    bindings = [b for b in of_kind(objects, "RoleBinding") if not b["metadata"]["name"].endswith("-leader-election")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for b in bindings:
        assert b["subjects"][0]["namespace"] == "pdserve-system"
    # Only read-only CRD discovery and node reads stay cluster-wide (a Role cannot grant a cluster-scoped resource).
    (cluster_role,) = of_kind(objects, "ClusterRole")
    assert _rule_set(cluster_role["rules"]) == ({("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")}
                                                | {("", "nodes", v) for v in ("get", "list", "watch")})
    for r in roles:
        assert not any("customresourcedefinitions" in rule["resources"] for rule in r["rules"])
        assert _rule_set(r["rules"]) | _rule_set(cluster_role["rules"]) == _rule_set(of_kind(render(chart), "ClusterRole")[0]["rules"])
    (deploy,) = of_kind(objects, "Deployment")
    for c in deploy["spec"]["template"]["spec"]["containers"]:
        assert "--namespace=team-a" in c["args"] and "--namespace=team-b" in c["args"]
        assert "--all-namespaces" not in c["args"]
    worker_monitors = [m for m in of_kind(objects, "PodMonitor") if "pdserve.io/role" in m["spec"]["selector"].get("matchLabels", {})]
    assert worker_monitors and all(m["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]} for m in worker_monitors)


def test_worker_monitors_store_vllm_metric_names_as_vllm_documents_them(chart: helm.Chart) -> None:
    """A Prometheus 2.x scrape of vLLM gets ``vllm_x`` for ``vllm:x`` (prometheus/client_python#1177):
    the engines' monitors rename them back; the router's names (``pdserve_``) are left alone."""
    monitors = {m["spec"]["selector"]["matchLabels"].get("pdserve.io/role"): m for m in of_kind(render(chart, {"monitoring": {"podMonitors": True}}), "PodMonitor")}
    for role in ("prefill", "decode"):
        (ep,) = monitors[role]["spec"]["podMetricsEndpoints"]
        assert ep["metricRelabelings"] == [{"sourceLabels": ["__name__"], "regex": "vllm_(.+)", "targetLabel": "__name__",
                                            "replacement": "vllm:$1"}], ep
    (router_ep,) = monitors["router"]["spec"]["podMetricsEndpoints"]
    assert "metricRelabelings" not in router_ep


def test_namespace_scope_defaults_to_the_release_namespace(chart: helm.Chart) -> None:
    objects = render(chart, {"operator": {"scope": "namespace"}}, namespace="ml")
    assert [r["metadata"]["namespace"] for r in of_kind(objects, "Role") if r is not _lease_role(objects)] == ["ml"]


def _rule_set(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_rbac_is_least_privilege(chart: helm.Chart) -> None:
    (role,) = of_kind(render(chart), "ClusterRole")
    granted = _rule_set(role["rules"])
    assert not any("*" in t for t in granted), "no wildcards"
    assert not any(r in {"secrets", "clusterroles", "clusterrolebindings"} for _, r, _ in granted)
    # Nodes are read (is a worker pod's node gone or unreachable?), never written.
    assert {v for _, r, v in granted if r == "nodes"} == {"get", "list", "watch"}
    # The planner reads one named ConfigMap (its capacity profile): get, never list or write.
    assert {v for _, r, v in granted if r == "configmaps"} == {"get"}
    assert not any(v == "delete" for _, _, v in granted), "children go with their owner (garbage collection)"
    assert not any(v in {"escalate", "bind", "impersonate", "deletecollection"} for _, _, v in granted)
    assert ("pdserve.io", "disaggregatedservices", "watch") in granted
    assert ("apps", "deployments", "create") in granted
    assert ("pdserve.io", "disaggregatedservices/status", "patch") in granted, "the planner writes status.planner"


def test_cluster_role_equals_the_operator_rules(chart: helm.Chart) -> None:
    (role,) = of_kind(render(chart), "ClusterRole")
    assert _rule_set(role["rules"]) == _rule_set(RULES)


def test_monitoring_objects_follow_the_toggles(chart: helm.Chart) -> None:
    # Offline rendering serves no monitoring.coreos.com/v1, so "auto" renders nothing.
    assert not of_kind(render(chart), "PodMonitor") and not of_kind(render(chart), "PrometheusRule")
    forced = render(chart, {"monitoring": {"podMonitors": True, "prometheusRule": True, "labels": {"release": "kps"}}})
    monitors = of_kind(forced, "PodMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {"pds-pdserve-prefill", "pds-pdserve-decode", "pds-pdserve-router", "pds-pdserve-planner"}
    assert all(m["metadata"]["labels"]["release"] == "kps" for m in monitors)
    for m in monitors:
        if m["metadata"]["name"].endswith("-planner"):
            assert m["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True, "planner series keep their own namespace label"
            continue
        targets = {r["targetLabel"] for r in m["spec"]["podMetricsEndpoints"][0]["relabelings"]}
        assert {"pdserve_service", "pdserve_role"} <= targets, "the dashboard and alerts group by these"
    (rule,) = of_kind(forced, "PrometheusRule")
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert {"PdserveTTFTSLOAttainmentLow", "PdserveITLSLOAttainmentLow", "PdservePlannerHeld", "PdservePodsPending"} <= alerts
    only_rule = render(chart, {"monitoring": {"podMonitors": False, "prometheusRule": True}})
    assert not of_kind(only_rule, "PodMonitor") and of_kind(only_rule, "PrometheusRule")


def test_dashboard_configmap_carries_the_dashboard_for_the_grafana_sidecar(chart: helm.Chart) -> None:
    (cm,) = of_kind(render(chart, {"dashboard": {"namespace": "monitoring"}}), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    assert json.loads(cm["data"]["pdserve.json"]) == json.loads((CHART_DIR / "dashboards" / "pdserve.json").read_text())
    assert not of_kind(render(chart, {"dashboard": {"enabled": False}}), "ConfigMap")


def test_image_tag_defaults_to_app_version(chart: helm.Chart) -> None:
    (deploy,) = of_kind(render(chart), "Deployment")
    image = deploy["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/pdserve/pdserve:{chart.metadata['appVersion']}"


@pytest.mark.parametrize("path", BAD_VALUES, ids=[p.stem for p in BAD_VALUES])
def test_bad_values_are_refused_with_a_clear_message(chart: helm.Chart, path: Path) -> None:
    expected = path.read_text().splitlines()[0].removeprefix("# expect:").strip()
    with pytest.raises(helm.HelmError) as excinfo:
        chart.render(values=load_values(path), name="pds", namespace="pdserve-system", is_install=True)
    assert expected in str(excinfo.value), str(excinfo.value)


def test_there_are_enough_bad_values_cases() -> None:
    assert len(BAD_VALUES) >= 5
