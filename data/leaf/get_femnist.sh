#!/usr/bin/env bash
# Build the FULL LEAF FEMNIST (all ~3,500 writers) with LEAF's own preprocessing.
#
# Needs internet, git, wget, unzip, python3 and tens of GB of free disk; takes hours.
# Never run by tests.
# Usage: data/leaf/get_femnist.sh [DEST]   (DEST defaults to ./leaf)
# Then:  fedgs data --dataset femnist --data-dir DEST/data/femnist/data
set -euo pipefail

for tool in git wget unzip python3; do
    command -v "$tool" >/dev/null || { echo "get_femnist.sh: needs $tool" >&2; exit 1; }
done

DEST="${1:-$PWD/leaf}"
LEAF_REPO="https://github.com/TalwalkarLab/leaf.git"

if [ ! -d "$DEST/.git" ]; then
    git clone "$LEAF_REPO" "$DEST"
fi

# LEAF's scripts call `python3` and need numpy and Pillow. Pillow < 10 because LEAF resizes with
# Image.ANTIALIAS, which Pillow 10 removed. A private venv keeps this away from other Pythons.
VENV="$DEST/.venv-leaf"
if [ ! -x "$VENV/bin/python3" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet numpy "pillow<10"
fi
export PATH="$VENV/bin:$PATH"

cd "$DEST/data/femnist"
# -s niid: sample whole writers; --sf 1.0: keep all data; -k 0: keep every writer;
# -t sample: split each writer's own samples into train/test (--tf default 0.9).
./preprocess.sh -s niid --sf 1.0 -k 0 -t sample

echo
echo "FEMNIST shards are in $DEST/data/femnist/data/{train,test}. Next:"
echo "  fedgs data --dataset femnist --data-dir $DEST/data/femnist/data"
