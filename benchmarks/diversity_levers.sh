#!/usr/bin/env bash
# Issue 21's diversity levers, side by side at equal steps: the recipe at untrusted-server
# epsilon <= 1,000 (least-queried sampling, sigma 0.5812: 17 queries per client of 100) with
# and without the mode-seeking term in G's loss (diversity-weight), a wider latent (z-dim) and
# client codes (client-code-dims: latent dims fixed per queried client),
# every run on the same 100 FEMNIST writers and seed, started together with one Ray CPU and
# one torch thread each (so they share the machine alike), then scored with the evaluation
# instrument and the controls in one invocation.
#
# Usage: [ONLY="variant ..."] bash benchmarks/diversity_levers.sh OUT [STEPS] [SEED]
#   OUT/<variant>/ (fedgs simulate outputs), OUT/<variant>.log, OUT/rows.json
#   ONLY: run just these variants (names below); every run in OUT is scored
set -euo pipefail
OUT=${1:?usage: diversity_levers.sh OUT [STEPS] [SEED]}
STEPS=${2:-600}
SEED=${3:-0}
DATA=${FEDGS_FEMNIST:-../shared/data/femnist_leaf}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
RECIPE=(--dataset femnist --data-dir "$DATA" --clients 100 --steps "$STEPS" --ray-cpus 1
        --eval-every 0 --seed "$SEED" --warm-start-steps 30 --lr-critic 1e-3
        --critic-steps 2 --lr-generator 5e-4 --beta1 0.5 --gradient-smoothing 1.0
        --label-mismatch-weight 2.0 --clients-per-step 2 --checkpoint-every 500
        --client-sampling least-queried --noise-multiplier 0.5812 --target-epsilon 1000)
declare -A VARIANTS=(
    [base]=""
    [ms0.05]="--diversity-weight 0.05"
    [ms1]="--diversity-weight 1"
    [ms1-z32]="--diversity-weight 1 --z-dim 32"
    [codes5]="--client-code-dims 5"
)
pids=()
for name in "${!VARIANTS[@]}"; do
    if [[ -n "${ONLY:-}" && " $ONLY " != *" $name "* ]]; then
        continue
    fi
    if [[ -f "$OUT/$name/privacy.json" ]]; then
        echo "$name: done already"
        continue
    fi
    echo "$name: started $(date +%T)"
    # shellcheck disable=SC2086
    fedgs simulate "${RECIPE[@]}" ${VARIANTS[$name]} --out "$OUT/$name" >"$OUT/$name.log" 2>&1 &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
echo "all finished $(date +%T)"
python "$(dirname "$0")/score_run.py" "$OUT"/*/ --data-dir "$DATA" --clients 100 \
    --json "$OUT/rows.json"
