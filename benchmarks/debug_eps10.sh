#!/usr/bin/env bash
# The flipped-pixel debugging scenario at user-level epsilon <= 10 (issue 21, goal 1): GS-WGAN
# (untrusted server, least-queried sampling) and Fed-Avg GAN (trusted server) on all FEMNIST
# writers with training data and on 1,000 MNIST-partition clients, one seed per call.
#
# Usage: bash benchmarks/debug_eps10.sh OUT SEED [CASE...]
#   CASE: gs-femnist fa-femnist gs-mnist fa-mnist (default: all four, one after the other)
#   OUT/<case>-s<SEED>/ (fedgs debug-scenario outputs), OUT/<case>-s<SEED>.log; then
#   python benchmarks/debug_table.py OUT/*/summary.json prints the results table.
# GS-WGAN's noise was planned for least-queried sampling, where every writer of a group answers
# the same number of queries: `fedgs privacy --clients K --clients-per-step 20 --batch-size 8
# --delta 1e-5 --target-epsilon 10 --client-sampling least-queried --steps T` gives sigma 5.7 for
# 12 queries per writer (FEMNIST groups of ~100 writers: ~61 steps) and sigma 4.25 for 7
# (MNIST-1000 groups of 331-366 writers: 115-128 steps). --target-epsilon stops each generator
# before its epsilon would pass 10; --steps is only a cap. Each run uses one Ray CPU and one
# torch thread, so two calls can share a 2-core machine.
set -euo pipefail
OUT=${1:?usage: debug_eps10.sh OUT SEED [CASE...]}
SEED=${2:?usage: debug_eps10.sh OUT SEED [CASE...]}
shift 2
CASES=("$@")
[[ ${#CASES[@]} -gt 0 ]] || CASES=(gs-femnist fa-femnist gs-mnist fa-mnist)
FEMNIST=(--dataset femnist --data-dir "${FEDGS_FEMNIST:-../shared/data/femnist_leaf}")
MNIST=(--dataset mnist --data-dir "${FEDGS_MNIST:-../shared/data/mnist}" --num-clients 1000)
# the exact (not private) grouping these cases were measured with; one warm-start step binds each
# node to its writer before step 1, so the target stop does not count the first step's queries
# against every writer (recipes/debug-femnist-e10.toml has the private grouping)
GSWGAN=(--clients-per-step 20 --batch-size 8 --gradient-smoothing 3 --lr-generator 5e-3
        --client-sampling least-queried --target-epsilon 10 --grouping-epsilon 0
        --warm-start-steps 1)
FEDAVG=(--strategy fedavg-gan --fedavg-models gswgan --steps 40 --fedavg-clients-per-round 10
        --fedavg-lr-client 5e-3 --batch-size 16 --critic-width 4 --target-epsilon 10
        --grouping-epsilon 0)
COMMON=(--seed "$SEED" --ray-cpus 1 --threads 1)
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
for case in "${CASES[@]}"; do
    case $case in
        gs-femnist) options=("${FEMNIST[@]}" "${GSWGAN[@]}" --steps 100 --noise-multiplier 5.7) ;;
        fa-femnist) options=("${FEMNIST[@]}" "${FEDAVG[@]}" --fedavg-noise-multiplier 1.0) ;;
        gs-mnist) options=("${MNIST[@]}" "${GSWGAN[@]}" --steps 150 --noise-multiplier 4.25) ;;
        fa-mnist) options=("${MNIST[@]}" "${FEDAVG[@]}" --fedavg-noise-multiplier 0.7) ;;
        *) echo "unknown case $case (gs-femnist fa-femnist gs-mnist fa-mnist)" >&2; exit 2 ;;
    esac
    name=$case-s$SEED
    if [[ -f "$OUT/$name/summary.json" ]]; then
        echo "$name: done already"
        continue
    fi
    echo "$name: started $(date +%T)"
    fedgs debug-scenario "${options[@]}" "${COMMON[@]}" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
    echo "$name: finished $(date +%T)"
done
