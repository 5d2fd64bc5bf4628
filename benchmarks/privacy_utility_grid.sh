#!/usr/bin/env bash
# The privacy-utility grid of issue 43: every point of recipes/privacy-utility/ (strategy x threat
# model x epsilon 1, 3, 10, 100) at seeds 0 and 1, on the complete FEMNIST writer set. A point
# already in the grid's record (results/privacy-utility/points.json) is skipped, so the grid
# grows over days and machines that do not keep run folders: each new point is trained, scored by
# `fedgs evaluate` on the held-out writers, and added to the record by `fedgs report --recorded`.
#
# Usage: [ONLY="dp-merf-secure-e3 ..."] [SEEDS="0 1"] [RAY_CPUS=2] [RECORD=FILE] \
#            bash benchmarks/privacy_utility_grid.sh FEMNIST_PARQUET [OUT]
#   FEMNIST_PARQUET: the complete writer set (../shared/data/femnist_full here)
#   OUT (default runs/grid): OUT/<point>-s<seed>/ the runs, OUT/<point>-s<seed>.log their output,
#   OUT/grid.html the report of the record (figure, table; OUT/grid_files/ PNG, CSV, markdown)
# A run stopped before it finished is resumed from its checkpoint; one that cannot resume (it
# stopped before its first checkpoint) is moved aside to OUT/<name>.stopped-<time> and rerun.
# Time on 2 shared cores: DP-MERF secure 18-40 min, local 5-9 min; Fed-Avg GAN 40-60 min;
# GS-WGAN ~2 h (results/log/synthetic-data.md).
set -euo pipefail
DATA=${1:?usage: privacy_utility_grid.sh FEMNIST_PARQUET [OUT]}
OUT=${2:-runs/grid}
RECORD=${RECORD:-results/privacy-utility/points.json}
SEEDS=${SEEDS:-0 1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
[[ -f "$RECORD" ]] || { echo "no $RECORD: run from the repository root" >&2; exit 2; }
mkdir -p "$OUT"

recorded() {
    python - "$RECORD" "$1" <<'EOF'
import sys
from pathlib import Path

from fedgs.evaluation.privacy_utility_table import read_record

path, run = Path(sys.argv[1]), sys.argv[2]
sys.exit(0 if any(p.run == run for p in read_record(path).points) else 1)
EOF
}

train() {
    local recipe=$1 seed=$2 run=$3
    [[ -f "$run.trained" ]] && return
    local args=(--config "$recipe" --seed "$seed" --data-dir "$DATA" --ray-cpus "${RAY_CPUS:-2}"
                --out "$run")
    if [[ -d "$run" ]] && ! fedgs simulate "${args[@]}" --resume >>"$run.log" 2>&1; then
        mv "$run" "$run.stopped-$(date +%Y%m%dT%H%M%S)"
    fi
    [[ -d "$run" ]] || fedgs simulate "${args[@]}" >>"$run.log" 2>&1
    touch "$run.trained"
}

for recipe in recipes/privacy-utility/*.toml; do
    point=$(basename "$recipe" .toml)
    if [[ -n "${ONLY:-}" && " $ONLY " != *" $point "* ]]; then
        continue
    fi
    for seed in $SEEDS; do
        name=$point-s$seed
        if recorded "$name"; then
            echo "$name: in the record"
            continue
        fi
        echo "$name: training, $(date +%T)"
        train "$recipe" "$seed" "$OUT/$name"
        echo "$name: scoring, $(date +%T)"
        fedgs evaluate "$OUT/$name" --data-dir "$DATA" --grad-norm-samples 0 >>"$OUT/$name.log" 2>&1
        fedgs report "$OUT/$name" --recorded "$RECORD" --out "$OUT/grid.html" >>"$OUT/$name.log"
        cp "$OUT/grid_files/privacy_utility_points.json" "$RECORD"
        echo "$name: recorded, $(date +%T)"
    done
done
