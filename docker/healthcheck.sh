#!/bin/sh
# The image's HEALTHCHECK: asks the server's grpc.health.v1 service with the
# dikkat CLI, which exits 0 only for SERVING. Follows DIKKAT_LISTEN (see
# entrypoint.sh); a wildcard host is checked on the loopback.
set -eu
listen="${DIKKAT_LISTEN:-0.0.0.0:50051}"
port="${listen##*:}"
host="${listen%:*}"
case "$host" in
  ""|0.0.0.0|"[::]"|"::") host=127.0.0.1 ;;
esac
exec /opt/dikkat/bin/dikkat --target="$host:$port" --timeout=3 health
