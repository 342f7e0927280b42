{{/* Names, labels and the values derived from several settings. */}}

{{- define "engram.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "engram.fullname" -}}
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

{{- define "engram.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "engram.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "engram.selectorLabels" -}}
app.kubernetes.io/name: {{ include "engram.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of one component: (list $ "server") */}}
{{- define "engram.componentLabels" -}}
{{ include "engram.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "engram.componentSelector" -}}
{{ include "engram.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "engram.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "engram.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag[@digest] of an image block; the tag defaults to the chart's appVersion. */}}
{{- define "engram.image" -}}
{{- $image := index . 0 }}
{{- $tag := default (index . 1).Chart.AppVersion $image.tag }}
{{- if $image.digest }}
{{- printf "%s:%s@%s" $image.repository $tag $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The base URL clients use; the MCP endpoint is this plus /mcp. With an HTTPRoute it is https and its
first host name: Gateways terminate TLS at their listeners (set config.publicUrl otherwise).
*/}}
{{- define "engram.publicUrl" -}}
{{- $routeHost := "" }}
{{- if .Values.httpRoute.enabled }}
{{- $routeHost = first (.Values.httpRoute.hostnames | default (list "")) }}
{{- end }}
{{- if .Values.config.publicUrl }}
{{- .Values.config.publicUrl | trimSuffix "/" }}
{{- else if .Values.ingress.enabled }}
{{- printf "%s://%s" (ternary "https" "http" .Values.ingress.tls.enabled) .Values.ingress.host }}
{{- else if and $routeHost (not (hasPrefix "*" $routeHost)) }}
{{- printf "https://%s" $routeHost }}
{{- else if eq (int .Values.service.port) 80 }}
{{- printf "http://%s.%s.svc" (include "engram.fullname" .) .Release.Namespace }}
{{- else }}
{{- printf "http://%s.%s.svc:%d" (include "engram.fullname" .) .Release.Namespace (int .Values.service.port) }}
{{- end }}
{{- end }}

{{/* The Secret holding the database URLs and other secret settings. */}}
{{- define "engram.secretName" -}}
{{- default (include "engram.fullname" .) .Values.existingSecret }}
{{- end }}

{{/*
The Secret with ENGRAM_ADMIN_DATABASE_URL for the migration Job: one of yours, or a hook Secret
the chart creates just before the Job (the release's own resources do not exist yet at
pre-install) and deletes once it succeeded.
*/}}
{{- define "engram.migrationSecretName" -}}
{{- .Values.migrations.existingSecret | default .Values.existingSecret | default (printf "%s-migrate" (include "engram.fullname" .)) }}
{{- end }}

{{/* The Secret with the bundled database's passwords: yours, or the chart's. */}}
{{- define "engram.postgresql.secretName" -}}
{{- .Values.postgresql.auth.existingSecret | default (include "engram.postgresql.fullname" .) }}
{{- end }}

{{/*
Whether the bundled database's URLs are composed in the pods from a password Secret you manage
("true" or empty): the chart then never sees the passwords.
*/}}
{{- define "engram.postgresql.composedUrls" -}}
{{- if and .Values.postgresql.enabled .Values.postgresql.auth.existingSecret }}true{{ end }}
{{- end }}

{{/* A database URL of the bundled database, the password taken from an environment variable: (list $ user variable). */}}
{{- define "engram.postgresql.url" -}}
{{- $ := index . 0 }}
{{- printf "postgresql://%s:$(%s)@%s:5432/%s" (index . 1) (index . 2) (include "engram.postgresql.fullname" $) $.Values.postgresql.database }}
{{- end }}

{{/*
The server container's env: its secret settings read key by key from existingSecret (or the
bundled database's URL composed from your password Secret), then extraEnv.
*/}}
{{- define "engram.serverEnv" -}}
{{- if .Values.existingSecret }}
{{- $keys := .Values.existingSecretKeys }}
- name: ENGRAM_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.existingSecret }}
      key: {{ required "existingSecretKeys.databaseUrl: the key of existingSecret that holds the database URL" $keys.databaseUrl }}
{{- range $variable, $key := dict "ENGRAM_OIDC_CLIENT_SECRET" $keys.oidcClientSecret "ENGRAM_EMBEDDING_API_KEY" $keys.embeddingApiKey "ENGRAM_UPSTREAM_PROVIDERS" $keys.upstreamProviders }}
{{- if $key }}
- name: {{ $variable }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.existingSecret }}
      key: {{ $key }}
      optional: true
{{- end }}
{{- end }}
{{- else if include "engram.postgresql.composedUrls" . }}
- name: BUNDLED_POSTGRES_APP_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "engram.postgresql.secretName" . }}
      key: ENGRAM_APP_PASSWORD
- name: ENGRAM_DATABASE_URL
  value: {{ include "engram.postgresql.url" (list . "engram_app" "BUNDLED_POSTGRES_APP_PASSWORD") | quote }}
{{- end }}
{{- with include "engram.cellsEnv" (list . "server") }}
{{ . }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The cells' env for one container, (list $ "server") or (list $ "migrate"): ENGRAM_CELLS and each
cell's URLs from Secrets (secretKeyRef, never literals). The run-time URL goes to both; the
standby, LISTEN URLs to the server only; owner and replication URLs to the migration Job only.
*/}}
{{- define "engram.cellsEnv" -}}
{{- $ := index . 0 }}
{{- $server := eq (index . 1) "server" }}
{{- $kinds := ternary (list "url" "readUrl" "listenUrl") (list "url" "adminUrl" "replicationUrl") $server }}
{{- $names := list }}
{{- range $i, $cell := $.Values.cells }}
{{- $name := toString $cell.name }}
{{- if not (regexMatch "^[a-z][a-z0-9]{0,30}$" $name) }}
{{- fail (printf "cells[%d].name: %q is not a cell name (a lowercase letter, then up to 30 lowercase letters or digits)" $i $name) }}
{{- end }}
{{- if eq $name "main" }}
{{- fail "cells: `main` is the control database (database.* and existingSecret); name the other cells" }}
{{- end }}
{{- if has $name $names }}
{{- fail (printf "cells: the name %q is used twice" $name) }}
{{- end }}
{{- if not (and $cell.urlSecret $cell.urlSecret.name $cell.urlSecret.key) }}
{{- fail (printf "cells[%d] (%s): urlSecret needs the name and key of the Secret holding ENGRAM_CELL_%s_URL" $i $name (upper $name)) }}
{{- end }}
{{- $names = append $names $name }}
{{- end }}
{{- with $names }}
- name: ENGRAM_CELLS
  value: {{ join "," . | quote }}
{{- end }}
{{- range $.Values.cells }}
{{- $cell := . }}
{{- range $kind := $kinds }}
{{- with get $cell (printf "%sSecret" $kind) }}
- name: {{ printf "ENGRAM_CELL_%s_%s" (upper $cell.name) (snakecase $kind | upper) }}
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .key }}
{{- end }}
{{- end }}
{{- end }}
{{- $main := ternary (dict "ENGRAM_CELL_MAIN_READ_URL" $.Values.database.readUrlSecret "ENGRAM_LISTEN_DATABASE_URL" $.Values.database.listenUrlSecret) (dict "ENGRAM_CELL_MAIN_REPLICATION_URL" $.Values.database.replicationUrlSecret) $server }}
{{- range $variable, $ref := $main }}
{{- if $ref }}
- name: {{ $variable }}
  valueFrom:
    secretKeyRef:
      name: {{ required (printf "%s: the Secret's name" $variable) $ref.name }}
      key: {{ required (printf "%s: the Secret's key" $variable) $ref.key }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The migration Job's env: the owner's URL from migrations.existingSecret, or from existingSecret
(falling back to the server's URL there), or composed for the bundled database; then extraEnv.
*/}}
{{- define "engram.migrationEnv" -}}
{{- if .Values.migrations.existingSecret }}
- name: ENGRAM_ADMIN_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.migrations.existingSecret }}
      key: {{ .Values.migrations.existingSecretKey }}
{{- else if .Values.existingSecret }}
- name: ENGRAM_ADMIN_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.existingSecret }}
      key: {{ .Values.migrations.existingSecretKey }}
      optional: true
- name: ENGRAM_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.existingSecret }}
      key: {{ .Values.existingSecretKeys.databaseUrl }}
{{- else if include "engram.postgresql.composedUrls" . }}
- name: BUNDLED_POSTGRES_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "engram.postgresql.secretName" . }}
      key: POSTGRES_PASSWORD
- name: ENGRAM_ADMIN_DATABASE_URL
  value: {{ include "engram.postgresql.url" (list . "postgres" "BUNDLED_POSTGRES_PASSWORD") | quote }}
{{- end }}
{{- with include "engram.cellsEnv" (list . "migrate") }}
{{ . }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
When migrations run: before install and upgrade; with the bundled database after install, since
the database is one of the release's resources.
*/}}
{{- define "engram.migrationHook" -}}
{{- ternary "post-install,pre-upgrade" "pre-install,pre-upgrade" .Values.postgresql.enabled }}
{{- end }}

{{/* Whether any database is configured ("true" or empty). */}}
{{- define "engram.hasDatabase" -}}
{{- if or .Values.existingSecret .Values.migrations.existingSecret .Values.postgresql.enabled .Values.database.url .Values.database.adminUrl }}true{{ end }}
{{- end }}

{{- define "engram.postgresql.fullname" -}}
{{- printf "%s-postgresql" (include "engram.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "engram.embeddings.fullname" -}}
{{- printf "%s-embeddings" (include "engram.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
PromQL label matchers that pick this release's series: what the ServiceMonitor's scrapes carry
(the Service's namespace, and its name as the job), unless metrics.prometheusRule.selector says.
*/}}
{{- define "engram.seriesSelector" -}}
{{- .Values.metrics.prometheusRule.selector | default (printf "namespace=%q, job=%q" .Release.Namespace (include "engram.fullname" .)) }}
{{- end }}

{{/* The port Prometheus scrapes: the metrics port, or the HTTP port when metrics.port is 0. */}}
{{- define "engram.metricsPortName" -}}
{{- if gt (int .Values.metrics.port) 0 }}metrics{{ else }}http{{ end }}
{{- end }}

{{/*
Whether the public URL may be the built-in authorization server's issuer ("true" or empty): https,
or http on a loopback address (a port-forward trial). Clients compare the issuer byte for byte
and refuse plain http elsewhere.
*/}}
{{- define "engram.publicUrlIsSecure" -}}
{{- $url := urlParse (include "engram.publicUrl" .) }}
{{- if or (eq $url.scheme "https") (and (eq $url.scheme "http") (or (eq $url.hostname "localhost") (eq $url.hostname "::1") (regexMatch "^127(\\.[0-9]{1,3}){3}$" $url.hostname))) }}true{{ end }}
{{- end }}

{{/* Settings the chart refuses to render, rather than hand a server that cannot work. */}}
{{- define "engram.checkAuth" -}}
{{- if eq .Values.auth.mode "builtin" }}
{{- if not (include "engram.publicUrlIsSecure" .) }}
{{- fail (printf "auth.mode=builtin: the public URL %q is the token issuer and must be https (set config.publicUrl=https://..., or ingress.enabled=true with ingress.tls.enabled=true); http only on a loopback address" (include "engram.publicUrl" .)) }}
{{- end }}
{{- $names := list }}
{{- range .Values.auth.builtin.upstreamProviders }}
{{- if has .name $names }}
{{- fail (printf "auth.builtin.upstreamProviders: the name %q is used twice" .name) }}
{{- end }}
{{- $names = append $names .name }}
{{- end }}
{{- if and .Values.existingSecret .Values.auth.builtin.upstreamProviders }}
{{- fail "auth.builtin.upstreamProviders carry client secrets and go into the chart's Secret, which existingSecret replaces: put their JSON list under ENGRAM_UPSTREAM_PROVIDERS in that Secret instead" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
ENGRAM_UPSTREAM_PROVIDERS: the providers as the server reads them (snake_case keys), as JSON.
*/}}
{{- define "engram.upstreamProvidersJson" -}}
{{- $providers := list }}
{{- range .Values.auth.builtin.upstreamProviders }}
{{- $provider := dict "name" .name "label" .label "issuer" .issuer "client_id" .clientId "client_secret" .clientSecret }}
{{- with .scopes }}
{{- $_ := set $provider "scopes" . }}
{{- end }}
{{- $providers = append $providers $provider }}
{{- end }}
{{- toJson $providers }}
{{- end }}
