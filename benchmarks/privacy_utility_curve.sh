#!/usr/bin/env bash
# The privacy-utility curve (issue 21, goal 3): GS-WGAN and Fed-Avg GAN on the same 100 FEMNIST
# writers, each run with the same wall-clock budget on this machine (warm start included), at
# several epsilons, one after the other; then every run and the controls scored with the
# evaluation instrument (held-out writers) into one table and one figure.
#
# Usage: [ONLY="run ..."] [SCORE=no] bash benchmarks/privacy_utility_curve.sh OUT [MINUTES] [SEED]
#   OUT/<run>/ (fedgs simulate outputs), OUT/<run>.log, OUT/rows.json, OUT/curve.png + .csv
#   ONLY: train just these runs (names below); SCORE=no: train only, score later in one
#   invocation with other seeds (score_run.py accepts run folders of several OUTs).
# The noise multipliers were planned for a 12-minute budget (about 6.5 minutes of it GS-WGAN's
# warm start on 2 cores): GS-WGAN, least-queried sampling, for ~650 steps, i.e. 13 queries per
# client (`fedgs privacy --clients 100 --steps 650 --clients-per-step 2 --batch-size 32 --delta
# 1e-5 --target-epsilon E --client-sampling least-queried`; untrusted-server epsilon); one
# uniform-sampling GS-WGAN run at sigma 0.5812 (17 queries of the most-queried client, epsilon
# 1000) as the lever's comparison; Fed-Avg GAN for 300 rounds of 10 expected clients of 100
# (trusted-server epsilon, autodp RDP; z planned under the continuous-Gaussian accountant of the
# time: today `fedgs privacy --strategy fedavg-gan --clients 100 --clients-per-step 10 --steps 300
# --delta 1e-5 --target-epsilon E` plans it, and gives larger z for the discrete noise).
# --target-epsilon stops a run that would pass E before its budget ends. Runs that
# already have a privacy.json are skipped.
set -euo pipefail
OUT=${1:?usage: privacy_utility_curve.sh OUT [MINUTES] [SEED]}
MINUTES=${2:-12}
SEED=${3:-0}
DATA=${FEDGS_FEMNIST:-../shared/data/femnist_leaf}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
COMMON=(--dataset femnist --data-dir "$DATA" --clients 100 --steps 30000 --max-minutes "$MINUTES"
        --ray-cpus 2 --eval-every 0 --seed "$SEED")
GSWGAN=(--warm-start-steps 30 --lr-critic 1e-3 --critic-steps 2 --lr-generator 5e-4 --beta1 0.5
        --gradient-smoothing 1.0 --label-mismatch-weight 2.0 --clients-per-step 2
        --checkpoint-every 500)
FEDAVG=(--strategy fedavg-gan --fedavg-models gswgan --checkpoint-every 50)

run() {
    local name=$1
    shift
    if [[ -n "${ONLY:-}" && " $ONLY " != *" $name "* ]]; then
        return
    fi
    if [[ -f "$OUT/$name/privacy.json" ]]; then
        echo "$name: done already"
        return
    fi
    echo "$name: started $(date +%T)"
    fedgs simulate "${COMMON[@]}" "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
    echo "$name: finished $(date +%T)"
}

run gs-e1000 "${GSWGAN[@]}" --noise-multiplier 0.5812 --target-epsilon 1000
run fa-e1000 "${FEDAVG[@]}" --fedavg-noise-multiplier 0.3566 --target-epsilon 1000
LEAST=(--client-sampling least-queried)
run gs-lq-e1000 "${GSWGAN[@]}" "${LEAST[@]}" --noise-multiplier 0.5812 --target-epsilon 1000
run fa-e10 "${FEDAVG[@]}" --fedavg-noise-multiplier 1.2688 --target-epsilon 10
run gs-lq-e10 "${GSWGAN[@]}" "${LEAST[@]}" --noise-multiplier 11.5837 --target-epsilon 10
run fa-nodp "${FEDAVG[@]}" --fedavg-noise-multiplier 0
run gs-lq-e100 "${GSWGAN[@]}" "${LEAST[@]}" --noise-multiplier 2.0127 --target-epsilon 100
run gs-lq-s0.1 "${GSWGAN[@]}" "${LEAST[@]}" --noise-multiplier 0.1
run fa-e100 "${FEDAVG[@]}" --fedavg-noise-multiplier 0.5297 --target-epsilon 100
[[ "${SCORE:-yes}" == no ]] && exit 0

SCORE=(python "$(dirname "$0")/score_run.py" --data-dir "$DATA" --clients 100)
# the curve: the controls and every run but the uniform-sampling comparison
CURVE_RUNS=()
for run_dir in "$OUT"/*/; do
    [[ "$(basename "$run_dir")" == gs-e1000 ]] || CURVE_RUNS+=("$run_dir")
done
"${SCORE[@]}" "${CURVE_RUNS[@]}" --json "$OUT/rows.json" --curve "$OUT/curve.png"
"${SCORE[@]}" "$OUT/gs-e1000" --no-controls --json "$OUT/rows-uniform.json"
