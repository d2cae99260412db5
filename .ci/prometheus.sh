# Sourced by .ci/run: Debian's prometheus package (prometheus and promtool, 2.42 on bookworm) for the rules'
# promtool suite (tests/unit/deploy/test_prometheus_rules.py) and the real Prometheus of
# tests/e2e/test_prometheus.py. Installed when missing, as root with apt-get; CI=true makes those tests fail
# rather than skip without it. docs/operations.md, "Alerts and dashboards".

install_prometheus() {
  if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    echo "ci: $(prometheus --version 2>&1 | head -1)"
    return 0
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "ci: prometheus/promtool missing and this machine cannot install them (needs root and apt-get)" >&2
    return 1
  fi
  echo "ci: installing prometheus (Debian's package: prometheus, promtool) ..."
  apt-get update -qq
  # --no-install-recommends: the exporters it recommends would start services of their own
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  echo "ci: $(prometheus --version 2>&1 | head -1)"
}
