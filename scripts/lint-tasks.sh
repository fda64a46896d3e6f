#!/usr/bin/env bash
# Harbor's lint over every generated task, as CI runs it (scripts/test.sh calls this script).
# With the Docker Compose plugin: all of Harbor's default rules. Without it, Harbor cannot parse the
# tasks' docker-compose.yaml, so every default rule that does not need Compose (task validity is
# also tested under tests/adapters).
set -euo pipefail
cd "$(dirname "$0")/.."
if docker compose version >/dev/null 2>&1; then
  .venv/bin/harbor lint tasks/*/
else
  rules="unknown-config-field shared-verifier artifact-log-overlap overlapping-artifacts
    unpinned-python-dependency verifier-runtime-install verifier-network-download agent-image-test-leak"
  .venv/bin/harbor lint $(for r in $rules; do printf -- '--select %s ' "$r"; done) tasks/*/
fi
