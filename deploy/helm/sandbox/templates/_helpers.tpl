{{/* The chart's name, or nameOverride. */}}
{{- define "sandbox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: fullnameOverride, else the release name,
with the chart's name appended unless the release name has it already.
*/}}
{{- define "sandbox.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sandbox.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "sandbox.labels" -}}
helm.sh/chart: {{ include "sandbox.chart" . }}
{{ include "sandbox.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sandbox
{{- end }}

{{/* The server pod's labels, which its Deployment and Service select. */}}
{{- define "sandbox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sandbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sandbox.serviceAccountName" -}}
{{- default (include "sandbox.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/*
The sandbox namespace, refused when it is the release's own: the server
would refuse to start (sandboxes never share the server's namespace).
*/}}
{{- define "sandbox.sandboxNamespace" -}}
{{- $ns := .Values.sandboxNamespace.name }}
{{- if eq $ns .Release.Namespace }}
{{- fail (printf "sandboxNamespace.name %q is the release's namespace: the sandbox pods need a namespace of their own (helm install -n sandbox-system ...)" $ns) }}
{{- end }}
{{- $ns }}
{{- end }}

{{- define "sandbox.adminKeySecret" -}}
{{- default (printf "%s-admin-key" (include "sandbox.fullname" .)) .Values.adminKey.existingSecret }}
{{- end }}

{{- define "sandbox.adminKeySecretKey" -}}
{{- if .Values.adminKey.existingSecret }}{{ .Values.adminKey.existingSecretKey }}{{ else }}key{{ end }}
{{- end }}

{{/*
The chart's admin key: the one its Secret already holds (an upgrade keeps
it), else a new one of the shape the server takes (sbk_ and 52 characters
of a-z and 2-7; letters only here, 244 random bits). It is computed once per
render and remembered on the root context, so the Secret and the pod's
checksum agree.
*/}}
{{- define "sandbox.adminKey" -}}
{{- if not (hasKey $ "sandboxAdminKey") }}
{{- $key := printf "sbk_%s" (randAlpha 52 | lower) }}
{{- $old := lookup "v1" "Secret" .Release.Namespace (include "sandbox.adminKeySecret" .) }}
{{- if and $old $old.data (hasKey $old.data "key") }}
{{- $key = index $old.data "key" | b64dec }}
{{- end }}
{{- $_ := set $ "sandboxAdminKey" $key }}
{{- end }}
{{- get $ "sandboxAdminKey" }}
{{- end }}

{{/* Where the admin key's file is mounted in the server. */}}
{{- define "sandbox.adminKeyDir" -}}/etc/sandbox/admin-key{{- end }}

{{/* The server's in-cluster URL: the Service's DNS name. */}}
{{- define "sandbox.issuerURL" -}}
{{- if .Values.server.issuerURL }}
{{- .Values.server.issuerURL }}
{{- else }}
{{- $port := "" }}
{{- if ne (int .Values.service.port) 80 }}{{ $port = printf ":%d" (int .Values.service.port) }}{{ end }}
{{- printf "http://%s.%s.svc.%s%s" (include "sandbox.fullname" .) .Release.Namespace .Values.clusterDomain $port }}
{{- end }}
{{- end }}

{{/*
The server's arguments: the named values' flags, then server.flags in
sorted order (--NAME=VALUE; a list repeats the flag). A flag a named value
owns is refused in server.flags, so there is one place to set each.
*/}}
{{- define "sandbox.args" -}}
{{- $tgps := int .Values.terminationGracePeriodSeconds }}
{{- if lt $tgps 6 }}
{{- fail (printf "terminationGracePeriodSeconds %d: give at least 6 (the server takes 5 s less as --shutdown-grace, then closes its store before the kubelet's SIGKILL)" $tgps) }}
{{- end }}
{{- $named := list "runtime" "namespace" "runtime-class" "data" "listen" "kubeconfig" "server-namespace" "service-account" "issuer-url" "shutdown-grace" "bootstrap-key-file" "operator-org" "preview-domain" "debug" "storage-class" "runner-image" }}
- serve
- --runtime=kube
- {{ printf "--namespace=%v" (include "sandbox.sandboxNamespace" .) | quote }}
- {{ printf "--runtime-class=%v" (.Values.runtimeClass.name) | quote }}
- --data=/data
- --listen=0.0.0.0:8080
- {{ printf "--server-namespace=%v" (.Release.Namespace) | quote }}
- {{ printf "--service-account=%v" (.Values.sandboxNamespace.podServiceAccount) | quote }}
- {{ printf "--issuer-url=%v" (include "sandbox.issuerURL" .) | quote }}
- --shutdown-grace={{ sub $tgps 5 }}s
- {{ printf "--operator-org=%v" (.Values.server.operatorOrg) | quote }}
- {{ printf "--runner-image=%v:%v" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) | quote }}
{{- if .Values.adminKey.enabled }}
- {{ printf "--bootstrap-key-file=%s/key" (include "sandbox.adminKeyDir" .) | quote }}
{{- end }}
{{- with .Values.server.previewDomain }}
- {{ printf "--preview-domain=%v" (.) | quote }}
{{- end }}
{{- if .Values.server.debug }}
- --debug
{{- end }}
{{- with .Values.server.storageClass }}
- {{ printf "--storage-class=%v" (.) | quote }}
{{- end }}
{{- if .Values.registry.enabled }}
{{- range $f := list "image-push" "image-push-resolve" }}
{{- if hasKey $.Values.server.flags $f }}
{{- fail (printf "server.flags.%s: registry.enabled sets it (the chart's own registry); turn the registry off to name another" $f) }}
{{- end }}
{{- end }}
- {{ printf "--image-push=%s-registry.%s.svc.%s:5000/snapshots" (include "sandbox.fullname" .) .Release.Namespace .Values.clusterDomain | quote }}
- --image-push-resolve
{{- end }}
{{- range $name := keys .Values.server.flags | sortAlpha }}
{{- if has $name $named }}
{{- fail (printf "server.flags.%s: this flag is set by a named value of the chart (see values.yaml), not server.flags" $name) }}
{{- end }}
{{- if or (hasPrefix "-" $name) (contains "=" $name) }}
{{- fail (printf "server.flags: %q: name a flag without dashes or '=' (ceiling: 48h)" $name) }}
{{- end }}
{{- $v := index $.Values.server.flags $name }}
{{- $vs := list $v }}
{{- if kindIs "invalid" $v }}{{ $vs = list }}{{ end }}
{{- if kindIs "slice" $v }}{{ $vs = $v }}{{ end }}
{{- range $vs }}
{{- $s := . }}
{{- /* Numbers from a values file are float64s: 1048576, not 1.048576e+06. */}}
{{- if and (kindIs "float64" $s) (eq (float64 (int64 $s)) $s) }}{{ $s = int64 $s }}{{ end }}
- {{ printf "--%s=%v" $name $s | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"foreign" when the cluster already has the object (list ROOT APIVERSION
KIND NAMESPACE NAME) and this release did not make it: the chart then
leaves it as it is rather than fail the install (Helm will not adopt an
object another installer made). On a cluster set up by scripts/kube-up.sh
that is the RuntimeClass gvisor, and whatever a server run on the host made
in the sandbox namespace. helm template without a cluster finds nothing.
*/}}
{{- define "sandbox.foreign" -}}
{{- $root := index . 0 }}
{{- $o := lookup (index . 1) (index . 2) (index . 3) (index . 4) }}
{{- if $o }}
{{- $a := $o.metadata.annotations | default dict }}
{{- if not (and (eq (get $a "meta.helm.sh/release-name") $root.Release.Name) (eq (get $a "meta.helm.sh/release-namespace") $root.Release.Namespace)) }}foreign{{ end }}
{{- end }}
{{- end }}
