#!/usr/bin/env bash
# A hyper-parameter grid as job lines, one per configuration, in random order:
#   bash examples/sweep.sh | go run ./cmd/gpudispatch --gpus 0,1
# Set GPUDISPATCH to an installed binary to skip the build.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC2016 # $CUDA_VISIBLE_DEVICES is for the job's shell
${GPUDISPATCH:-go run ./cmd/gpudispatch} sweep \
  'echo training lr={lr} bs={bs} opt={opt} on GPU $CUDA_VISIBLE_DEVICES; sleep 0.2' \
  -p lr 1e-3 1e-4 -p bs 32 64 -p opt adam "sgd momentum=0.9"
