{{/* The release's name for its objects, within Kubernetes' 63 characters. */}}
{{- define "mcpmon.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mcpmon.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mcpmon.labels" -}}
{{ include "mcpmon.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
The fleet file: .Values.fleet, with a kubernetes_sd_configs entry for each
discovery role (in the watched namespaces, or the release's own).
*/}}
{{- define "mcpmon.fleet" -}}
{{- $fleet := deepCopy .Values.fleet -}}
{{- $k := .Values.kubernetesDiscovery -}}
{{- $sd := $fleet.kubernetes_sd_configs | default list -}}
{{- range $k.roles -}}
{{- $ns := dict "own_namespace" true -}}
{{- if $k.allNamespaces -}}
{{- $ns = dict -}}
{{- else if $k.namespaces -}}
{{- $ns = dict "names" $k.namespaces -}}
{{- end -}}
{{- $sd = append $sd (dict "role" . "namespaces" $ns) -}}
{{- end -}}
{{- if $sd -}}
{{- $_ := set $fleet "kubernetes_sd_configs" $sd -}}
{{- end -}}
{{- toYaml $fleet -}}
{{- end -}}

{{/*
The API groups and resources each discovery role reads (the code's own list:
`mcpmon check-config` prints it, and a test holds the two together).
*/}}
{{- define "mcpmon.discoveryResources" -}}
service: [{group: "", resource: services}]
toolhive_mcpserver: [{group: toolhive.stacklok.dev, resource: mcpservers}]
toolhive_mcpremoteproxy: [{group: toolhive.stacklok.dev, resource: mcpremoteproxies}]
toolhive_mcpserverentry: [{group: toolhive.stacklok.dev, resource: mcpserverentries}]
toolhive_virtualmcpserver: [{group: toolhive.stacklok.dev, resource: virtualmcpservers}]
kagent_remotemcpserver: [{group: kagent.dev, resource: remotemcpservers}]
kmcp_mcpserver: [{group: kagent.dev, resource: mcpservers}]
mcp_lifecycle_mcpserver: [{group: mcp.x-k8s.io, resource: mcpservers}]
agentgateway_backend: [{group: agentgateway.dev, resource: agentgatewaybackends}]
# A registration's server is the backend of the HTTPRoute it names.
kuadrant_mcpserverregistration: [{group: mcp.kuadrant.io, resource: mcpserverregistrations}, {group: gateway.networking.k8s.io, resource: httproutes}]
{{- end -}}

{{/* The RBAC rules for the discovery roles: list and watch, nothing more. */}}
{{- define "mcpmon.discoveryRules" -}}
{{- $resources := include "mcpmon.discoveryResources" . | fromYaml -}}
{{- range .Values.kubernetesDiscovery.roles }}
{{- range required (printf "kubernetesDiscovery.roles: unknown role %q" .) (get $resources .) }}
- apiGroups: [{{ .group | quote }}]
  resources: [{{ .resource }}]
  verbs: [list, watch]
{{- end }}
{{- end }}
{{- end -}}
