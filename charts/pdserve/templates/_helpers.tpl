{{/* Names are capped at 63 characters (DNS labels); the release name is capped at 53 by Helm. */}}
{{- define "pdserve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pdserve.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "pdserve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pdserve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "pdserve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "pdserve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pdserve
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "pdserve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pdserve.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create=false (the operator needs an existing ServiceAccount bound to its rules)" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "pdserve.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The namespaces the operator watches when scope=namespace, as a list. */}}
{{- define "pdserve.watchNamespaces" -}}
{{- if .Values.operator.watchNamespaces -}}
{{- toJson .Values.operator.watchNamespaces -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/* "true" when Prometheus Operator objects of this toggle should be rendered. */}}
{{- define "pdserve.monitoringEnabled" -}}
{{- $toggle := index . 0 -}}
{{- $ctx := index . 1 -}}
{{- if eq (toString $toggle) "auto" -}}
{{- $ctx.Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}
{{- else -}}
{{- $toggle -}}
{{- end -}}
{{- end -}}

{{/*
The operator's least-privilege rules. The source of truth is
pdserve.operator.rbac.RULES; tests/chart checks the chart grants exactly those.
The planner (in the same pod, same ServiceAccount) needs only a subset: patch on
the resource (replicas) and on its status (status.planner).
*/}}
{{- define "pdserve.namespacedRules" -}}
- apiGroups: ["pdserve.io"]
  resources: ["disaggregatedservices"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["pdserve.io"]
  resources: ["disaggregatedservices/status"]
  verbs: ["get", "patch"]
- apiGroups: ["pdserve.io"]
  resources: ["disaggregatedservices/finalizers"]
  verbs: ["update"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["services", "serviceaccounts"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
{{- end -}}

{{/* Cluster-scoped: a Role cannot grant these, so namespace scope keeps a small ClusterRole for them. */}}
{{- define "pdserve.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
{{- end -}}

{{/* Leader election: only the operator's own Lease, in the release namespace (pdserve.operator.rbac.LEASE_RULES). */}}
{{- define "pdserve.leaseRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update"]
{{- end -}}
