#!/bin/sh
# The configuration comes whole from the pool (EGRESS_CONFIG, EGRESS_FILTER); nothing here decides what is allowed.
set -eu
: "${EGRESS_CONFIG:?EGRESS_CONFIG is not set: the pool writes this proxy's configuration}"
printf '%s\n' "$EGRESS_CONFIG" > /tmp/tinyproxy.conf
printf '%s\n' "${EGRESS_FILTER:-}" > /tmp/egress-filter
exec tinyproxy -d -c /tmp/tinyproxy.conf
