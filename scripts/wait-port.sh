#!/usr/bin/env bash
# wait-port.sh NETNS PORT [SECONDS]: wait until something listens on PORT (TCP or UDP) in NETNS.
set -euo pipefail
ns=$1 port=$2 limit=${3:-20}
deadline=$((SECONDS + limit))
until ip netns exec "$ns" ss -ltnH "sport = :$port" | grep -q .; do
    [ $SECONDS -lt $deadline ] || { echo "wait-port: nothing listens on $port in $ns after ${limit}s" >&2; exit 1; }
    sleep 0.05
done
