# Sourced by .ci/run: a Docker engine for the run. One that already answers is used as it is; otherwise, as root
# with Debian's packages reachable, docker.io (with docker-compose and debootstrap, which `make images` and the
# compose test need) is installed when missing and a dockerd is started for this run only, stopped by
# stop_docker_engine (.ci/run traps EXIT, so it stops on a failure too). docs/containers.md.

DOCKER_ENGINE_PID=""
DOCKER_ENGINE_DIR=""
POOL_BRIDGES_GUARDED=""

_install_docker_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if ((${#missing[@]})); then
    echo "ci: installing ${missing[*]} (Debian's packages) ..."
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

start_docker_engine() {
  if docker info >/dev/null 2>&1; then
    echo "ci: a Docker engine answers already; using it"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then _install_docker_packages; fi
    if [ "$(id -u)" = 0 ]; then guard_pool_bridges; fi
    return 0
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "ci: no Docker engine answers and this machine cannot bring one (needs root and apt-get)" >&2
    return 1
  fi
  _install_docker_packages
  DOCKER_ENGINE_DIR=$(mktemp -d /tmp/ci-dockerd.XXXXXX)
  # iptables on: the daemon enforces an `internal` network (no route out, none to another network), which the pool's
  # per-tenant networks rely on (issue 36); the host rule below keeps pool machines off the host's own services
  dockerd --pidfile "$DOCKER_ENGINE_DIR/dockerd.pid" >"$DOCKER_ENGINE_DIR/dockerd.log" 2>&1 &
  DOCKER_ENGINE_PID=$!
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && {
      echo "ci: started dockerd (pid $DOCKER_ENGINE_PID) for this run"
      guard_pool_bridges
      return 0
    }
    kill -0 "$DOCKER_ENGINE_PID" 2>/dev/null || break
    sleep 1
  done
  echo "ci: dockerd did not come up; its log:" >&2
  tail -20 "$DOCKER_ENGINE_DIR/dockerd.log" >&2
  return 1
}

# A pool tenant network's bridge is named thtn<key> (policy/pool/tenant_network.py). `internal` stops forwarding, not
# the host itself, which answers on every address it has, the bridge's gateway too: a machine could reach the pool
# dispatcher, Postgres or the edge's admin port on the host. These two rules let in only the answers to the pool's
# own connections (health, execute, cancel) from those bridges (docs/containers.md).
POOL_BRIDGE_RULES=(
  "INPUT -i thtn+ -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"
  "INPUT -i thtn+ -j DROP"
)

guard_pool_bridges() {
  command -v iptables >/dev/null || { echo "ci: no iptables: pool machines can reach the host's services" >&2; return 0; }
  local rule
  for ((i = ${#POOL_BRIDGE_RULES[@]} - 1; i >= 0; i--)); do
    rule=${POOL_BRIDGE_RULES[$i]}
    # shellcheck disable=SC2086 - the rule is words
    iptables -C $rule 2>/dev/null || iptables -I $rule
  done
  POOL_BRIDGES_GUARDED=1
  echo "ci: pool tenant bridges (thtn+) may answer the host, not reach it"
}

unguard_pool_bridges() {
  [ -n "$POOL_BRIDGES_GUARDED" ] || return 0
  POOL_BRIDGES_GUARDED=""
  local rule
  for rule in "${POOL_BRIDGE_RULES[@]}"; do
    # shellcheck disable=SC2086
    while iptables -C $rule 2>/dev/null; do iptables -D $rule; done
  done
}

stop_docker_engine() {
  unguard_pool_bridges
  [ -n "$DOCKER_ENGINE_PID" ] || return 0
  echo "ci: stopping dockerd (pid $DOCKER_ENGINE_PID); containers left: $(docker ps -aq 2>/dev/null | wc -l)"
  kill -TERM "$DOCKER_ENGINE_PID" 2>/dev/null || true
  for _ in $(seq 1 30); do kill -0 "$DOCKER_ENGINE_PID" 2>/dev/null || break; sleep 1; done
  kill -KILL "$DOCKER_ENGINE_PID" 2>/dev/null || true
  wait "$DOCKER_ENGINE_PID" 2>/dev/null || true
  rm -rf "$DOCKER_ENGINE_DIR"
  DOCKER_ENGINE_PID=""
}
