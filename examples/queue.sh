#!/usr/bin/env bash
# A standing queue on this machine's (pretend) GPUs, steered from "other
# terminals": serve in the background, submit the example jobs and an
# urgent one that overtakes them, watch status, wait, stop.
#   bash examples/queue.sh
# Set GPUDISPATCH to an installed binary to skip the build.
set -euo pipefail
cd "$(dirname "$0")/.."
gpd=${GPUDISPATCH:-}
if [ -z "$gpd" ]; then
  gpd=$(mktemp -d)/gpudispatch
  go build -o "$gpd" ./cmd/gpudispatch
fi
logs=$(mktemp -d)/queue
mkdir -m 700 "$logs"
"$gpd" serve --gpus 0,1 -o "$logs" -q &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
until [ -S "$logs/gpudispatch.sock" ]; do sleep 0.1; done

"$gpd" submit -o "$logs" < examples/cmds.txt > /dev/null
# shellcheck disable=SC2016 # $CUDA_VISIBLE_DEVICES is for the job's shell
"$gpd" submit -o "$logs" --name urgent --priority 5 -- 'echo urgent on GPU $CUDA_VISIBLE_DEVICES'
"$gpd" status -o "$logs" || true # exit 1 while some job has not succeeded yet
"$gpd" submit -o "$logs" --wait -- 'echo last one'
until "$gpd" status -o "$logs" > /dev/null; do sleep 0.2; done # exit 0: all succeeded
"$gpd" status -o "$logs"
"$gpd" stop -o "$logs"
wait "$server" || [ $? = 130 ] # a stopped server exits 130, as a drained run
echo "logs and journal: $logs"
