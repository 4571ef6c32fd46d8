{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "shardcdc.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name of the release's objects: <release>-<chart> unless the release name contains the chart's. */}}
{{- define "shardcdc.fullname" -}}
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

{{/* The operator's objects (the Deployment, its pods, RBAC) share these selector labels. */}}
{{- define "shardcdc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shardcdc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "shardcdc.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "shardcdc.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: shardcdc
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "shardcdc.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "shardcdc.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "shardcdc.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The default worker image (workerImage), passed to the operator as SHARDCDC_WORKER_IMAGE.
*/}}
{{- define "shardcdc.workerImage" -}}
{{- if .Values.workerImage.digest -}}
{{- printf "%s@%s" .Values.workerImage.repository .Values.workerImage.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.workerImage.repository (default .Chart.AppVersion .Values.workerImage.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Exactly what the operator uses (cdcoperator: handlers, reconcile, apply); tests/test_operator_rbac.py
runs the operator with nothing more:
  cdcconnectors            list/watch: kopf's watch; get: reconcile reads the object fresh;
                           patch: kopf's finalizer and progress annotations, removing the one-shot
                           shardcdc.io/restart annotation
  cdcconnectors/status     patch: conditions, assignment, shards (the status subresource)
  deployments, configmaps  a task's Deployment, a generation's ConfigMap: list (by label), get
                           (after a create conflict), create, patch (scale, config roll-out,
                           restart), delete (an exited task's Deployment), deletecollection (an exited generation's objects, by its
                           connector and generation labels: one call, not one per task)
  pods                     list/watch: the operator's index of worker pods (task phases, exit codes)
  events                   create: an event for each step
  sparkapplications, jobs  backfills (cdcoperator.backfill, rbac.backfills.*): list (by label),
                           create (once, 409 = it exists), delete (cancellation); get for kubectl
                           users' parity; no patch/watch (status is read by the resync's list)
  secrets                  only with rbac.sourceSecrets or rbac.kafkaSecrets: get, by name, for
                           listing the shards of a source with tls.enabled (CA, client certificate)
                           or credentials (cdcoperator.discovery.source_access), and for reaching a
                           Kafka cluster with spec.kafka.securitySecretRef (offsets scan,
                           DeleteOffsets, the offsets annotation, backfill progress:
                           cdcoperator.kafkaaccess); never list/watch
Nothing else: by default no Secrets (workers mount them), no pod writes, no CRDs or namespaces
(settings.scanning.disabled), no leases or kopf peering objects (standalone: one replica with
strategy Recreate).
*/}}
{{- define "shardcdc.rules" -}}
- apiGroups: ["shardcdc.io"]
  resources: ["cdcconnectors"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["shardcdc.io"]
  resources: ["cdcconnectors/status"]
  verbs: ["patch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "create", "patch", "delete", "deletecollection"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "create", "patch", "delete", "deletecollection"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- if .Values.networkPolicy.create }}
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "create", "patch", "delete"]
{{- end }}
{{- if and (include "shardcdc.secretsGranted" .) (not (include "shardcdc.secretsPerNamespace" .)) }}
{{ include "shardcdc.secretRule" . }}
{{- end }}
{{- if .Values.rbac.backfills.sparkOperator }}
- apiGroups: ["sparkoperator.k8s.io"]
  resources: ["sparkapplications"]
  verbs: ["get", "list", "create", "delete"]
{{- end }}
{{- if .Values.rbac.backfills.sparkSubmit }}
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "create", "delete"]
{{- end }}
{{- end -}}

{{/* "true" when rbac.sourceSecrets or rbac.kafkaSecrets asks for get on Secrets. */}}
{{- define "shardcdc.secretsGranted" -}}
{{- if or .Values.rbac.sourceSecrets .Values.rbac.kafkaSecrets }}true{{ end -}}
{{- end -}}

{{/*
"true" when the Secrets rule goes into Roles of rbac.secretNamespaces instead of the ClusterRole
(cluster-wide operator; with watchNamespaces every rule is in the watched namespaces' Roles anyway).
*/}}
{{- define "shardcdc.secretsPerNamespace" -}}
{{- if and (empty .Values.watchNamespaces) (not (empty .Values.rbac.secretNamespaces)) }}true{{ end -}}
{{- end -}}

{{- define "shardcdc.secretRule" -}}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end -}}

{{/* The operator's policy (values: policy), as the JSON the operator reads from SHARDCDC_OPERATOR_POLICY. */}}
{{- define "shardcdc.policy" -}}
{{- $repos := prepend .Values.policy.imageRepositories .Values.workerImage.repository | uniq -}}
{{- dict "imageRepositories" $repos "serviceAccounts" (.Values.policy.serviceAccounts | default list) | toJson -}}
{{- end -}}

{{/* The workers' NetworkPolicy settings the operator applies per connector (cdcoperator.networkpolicy). */}}
{{- define "shardcdc.networkPolicy" -}}
{{- $labels := include "shardcdc.selectorLabels" . | fromYaml -}}
{{- dict "operatorNamespace" .Release.Namespace "operatorLabels" $labels "monitoringNamespace" (.Values.networkPolicy.monitoringNamespace | default "") "extraFrom" (.Values.networkPolicy.extraFrom | default list) | toJson -}}
{{- end -}}

{{- define "shardcdc.webhookService" -}}
{{- printf "%s-webhook" (include "shardcdc.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "shardcdc.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "shardcdc.fullname" .) -}}
{{- end -}}

{{/* Worker pods carry these labels (cdcoperator.naming.task_labels). */}}
{{- define "shardcdc.workerSelector" -}}
app.kubernetes.io/name: shardcdc-worker
app.kubernetes.io/component: worker
{{- end -}}
