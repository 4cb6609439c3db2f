{{- define "toolbay.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "toolbay.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selectorLabels: (dict "root" $ "component" "web") */}}
{{- define "toolbay.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "toolbay.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "toolbay.fullname" .)) -}}
{{- end -}}

{{- define "toolbay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "toolbay.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "toolbay.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The pod-level fields every Toolbay pod shares. */}}
{{- define "toolbay.podSpec" -}}
serviceAccountName: {{ include "toolbay.serviceAccountName" . }}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .Values.runAsUser }}
  runAsGroup: {{ .Values.runAsGroup }}
  fsGroup: {{ .Values.runAsGroup }}
  seccompProfile:
    type: RuntimeDefault
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  # The root filesystem is read-only: /tmp is the one place a process writes (Python's
  # temporary files, beat's schedule file).
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
  {{- if .Values.tlsSecret }}
  - name: tls
    secret:
      secretName: {{ .Values.tlsSecret }}
  {{- end }}
{{- end -}}

{{/* The container-level fields every Toolbay container shares (image, security, env, mounts). */}}
{{- define "toolbay.container" -}}
image: {{ include "toolbay.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities:
    drop: ["ALL"]
  {{- if and .runner .Values.packagedRunner.sandbox.enabled }}
  # bubblewrap creates user namespaces, which RuntimeDefault refuses (see values.yaml).
  seccompProfile:
    type: Unconfined
  {{- if .Values.packagedRunner.sandbox.userNamespace }}
  procMount: Unmasked
  {{- end }}
  {{- end }}
envFrom:
  - secretRef:
      name: {{ include "toolbay.secretName" . }}
env:
  - name: DEBUG
    value: "0"
  - name: ALLOWED_HOSTS
    value: {{ concat (list "localhost") .Values.allowedHosts | join "," | quote }}
  - name: DATABASE_CONN_MAX_AGE
    value: {{ .Values.database.connMaxAge | quote }}
  {{- if .Values.database.pgbouncer }}
  - name: DATABASE_PGBOUNCER
    value: "1"
  {{- end }}
  - name: LOG_FORMAT
    value: {{ .Values.logFormat | quote }}
  - name: LOG_LEVEL
    value: {{ .Values.logLevel | quote }}
  {{- with .Values.publicUrl }}
  - name: TOOLBAY_PUBLIC_URL
    value: {{ . | quote }}
  {{- end }}
  - name: TOOLBAY_TRUSTED_PROXIES
    value: {{ .Values.trustedProxies | quote }}
  {{- if and .runner .Values.packagedRunner.sandbox.optOut }}
  - name: TOOLBAY_SANDBOX_OPTOUT
    value: "1"
  {{- end }}
  {{- range $name, $value := .Values.env }}
  - name: {{ $name }}
    value: {{ $value | quote }}
  {{- end }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  {{- if .Values.tlsSecret }}
  - name: tls
    mountPath: /etc/toolbay/ca
    readOnly: true
  {{- end }}
{{- end -}}

{{/* Rolls every pod when the chart-made Secret changes. */}}
{{- define "toolbay.podAnnotations" -}}
{{- if not .Values.secrets.existingSecret }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}
