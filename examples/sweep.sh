#!/usr/bin/env bash
# A hyper-parameter grid as job lines, one per configuration:
#   bash examples/sweep.sh | go run ./cmd/gpudispatch --gpus 0,1
for lr in 1e-3 1e-4; do
  for bs in 32 64; do
    echo "echo training lr=$lr bs=$bs on GPU \$CUDA_VISIBLE_DEVICES; sleep 0.2"
  done
done
