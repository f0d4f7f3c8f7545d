{{/* Names and labels. */}}
{{- define "relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "relay.fullname" -}}
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

{{- define "relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "relay.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: relay
{{- end -}}

{{- define "relay.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Secret holding RELAY_DATABASE_URL, RELAY_BROKER_URL, RELAY_ADMIN_TOKEN, RELAY_SECRET_KEY. */}}
{{- define "relay.secretName" -}}
{{- default (include "relay.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{- define "relay.claimName" -}}
{{- default (printf "%s-payloads" (include "relay.fullname" .)) .Values.payloads.shared.existingClaim -}}
{{- end -}}

{{/* Whether the workers get a Deployment of their own: every pod sees every payload (a shared claim, a bucket). */}}
{{- define "relay.separateWorkers" -}}
{{- if and .Values.payloads.shared.enabled .Values.payloads.s3.enabled -}}
{{- fail "payloads.shared.enabled and payloads.s3.enabled: choose one (with s3, no claim is needed)" -}}
{{- end -}}
{{- if and .Values.payloads.s3.enabled (not .Values.payloads.s3.bucket) -}}
{{- fail "payloads.s3.enabled needs payloads.s3.bucket" -}}
{{- end -}}
{{- if or .Values.payloads.shared.enabled .Values.payloads.s3.enabled -}}true{{- end -}}
{{- end -}}

{{/* The component whose pods run the workers: their own Deployment when every pod sees every payload, else the
API pods. */}}
{{- define "relay.workerComponent" -}}
{{- if include "relay.separateWorkers" . -}}worker{{- else -}}api{{- end -}}
{{- end -}}

{{/* Worker pods get the item time limit plus a margin (>= 40 s) to finish running items after SIGTERM. */}}
{{- define "relay.terminationGracePeriodSeconds" -}}
{{- add (int .Values.config.batchItemTimeLimitSeconds) (int .Values.worker.terminationGraceMarginSeconds) -}}
{{- end -}}

{{/* Environment of every Relay container: secrets by reference, settings by value. */}}
{{- define "relay.env" -}}
{{- $secret := include "relay.secretName" . -}}
{{- range $var := list "RELAY_DATABASE_URL" "RELAY_BROKER_URL" "RELAY_ADMIN_TOKEN" "RELAY_SECRET_KEY" }}
- name: {{ $var }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $var }}
{{- end }}
- name: RELAY_BATCH_PAYLOAD_DIR
  value: {{ .Values.payloads.mountPath | quote }}
{{- with .Values.payloads.s3 }}
{{- if .enabled }}
- name: RELAY_PAYLOAD_BACKEND
  value: "s3"
- name: RELAY_S3_BUCKET
  value: {{ .bucket | quote }}
- name: RELAY_S3_ENDPOINT_URL
  value: {{ .endpointUrl | quote }}
- name: RELAY_S3_PREFIX
  value: {{ .prefix | quote }}
- name: RELAY_S3_REGION
  value: {{ .region | quote }}
{{- if .credentialsSecret }}
{{- range $var := list "AWS_ACCESS_KEY_ID" "AWS_SECRET_ACCESS_KEY" }}
- name: {{ $var }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.payloads.s3.credentialsSecret }}
      key: {{ $var }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
- name: RELAY_BATCH_ITEM_TIME_LIMIT_S
  value: {{ .Values.config.batchItemTimeLimitSeconds | quote }}
- name: RELAY_QUEUE_NAME
  value: {{ .Values.config.queueName | quote }}
- name: RELAY_QUEUE_TYPE
  value: {{ .Values.config.queueType | quote }}
- name: RELAY_DISPATCH_WINDOW
  value: {{ .Values.config.dispatchWindow | quote }}
- name: RELAY_DB_POOL_MAX
  value: {{ .Values.config.dbPoolMax | quote }}
- name: RELAY_WORKER_METRICS_PORT
  value: {{ .Values.config.workerMetricsPort | quote }}
{{- if .Values.serviceMonitor.enabled }}
- name: RELAY_METRICS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: RELAY_METRICS_TOKEN
{{- end }}
- name: RELAY_WORKER_METRICS_HOST
  value: {{ include "relay.workerMetricsHost" . | quote }}
{{- range $name, $value := .Values.config.extraEnv }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* The workers' metrics port listens inside the pod only (its probes exec in the container), unless a
ServiceMonitor scrapes it: then on the pod's address, answering the metrics token alone. */}}
{{- define "relay.workerMetricsHost" -}}
{{- if .Values.serviceMonitor.enabled -}}0.0.0.0{{- else -}}127.0.0.1{{- end -}}
{{- end -}}

{{- define "relay.payloadVolume" -}}
- name: payloads
{{- if .Values.payloads.shared.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "relay.claimName" . }}
{{- else if .Values.payloads.local.sizeLimit }}
  emptyDir:
    sizeLimit: {{ .Values.payloads.local.sizeLimit }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- end -}}

{{- define "relay.payloadMount" -}}
- name: payloads
  mountPath: {{ .Values.payloads.mountPath }}
{{- end -}}

{{/* Pod-level settings shared by every Relay pod. */}}
{{- define "relay.podSpecCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Scheduling of one component (.component: the api or worker values). */}}
{{- define "relay.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The `relay worker` container: PID 1 of its container, so SIGTERM reaches Dramatiq's main process only. */}}
{{- define "relay.workerContainer" -}}
- name: worker
  image: {{ include "relay.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command:
    - relay
    - worker
    - --processes
    - {{ .Values.worker.processes | quote }}
    - --threads
    - {{ .Values.worker.threads | quote }}
    {{- if .Values.worker.gevent }}
    - --gevent
    {{- end }}
  env:
    {{- include "relay.env" . | trim | nindent 4 }}
  {{- if .Values.serviceMonitor.enabled }}
  ports:
    - name: metrics
      containerPort: {{ .Values.config.workerMetricsPort }}
      protocol: TCP
  {{- end }}
  {{- with .Values.worker.startupProbe }}
  startupProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.worker.livenessProbe }}
  livenessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.worker.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    {{- include "relay.payloadMount" . | nindent 4 }}
{{- end -}}

{{/* Hook annotations (.weight, .deletePolicy): run before install and upgrade, in weight order. */}}
{{- define "relay.hookAnnotations" -}}
helm.sh/hook: pre-install,pre-upgrade
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: {{ .deletePolicy | default "before-hook-creation,hook-succeeded" }}
{{- end -}}

{{/* A container of the retention CronJob (.root: the chart's context, .name, .command; .payloads: mount the payload
directory). */}}
{{- define "relay.retentionContainer" -}}
{{- $root := .root -}}
- name: {{ .name }}
  image: {{ include "relay.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  command:
    {{- toYaml .command | nindent 4 }}
  env:
    {{- include "relay.env" $root | trim | nindent 4 }}
  {{- with $root.Values.retention.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .payloads }}
  volumeMounts:
    {{- include "relay.payloadMount" $root | nindent 4 }}
  {{- end }}
{{- end -}}
