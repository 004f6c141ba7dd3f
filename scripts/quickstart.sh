#!/usr/bin/env bash
# One command from a fresh machine: install, build, run the main job on examples/.
# Until `foldcore predict` lands, the main job is the Transformer-core smoke training.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
mkdir -p out
# On a busy or small machine, spinning OpenMP workers cost more than they save.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
build/foldcore info
# Transformer-core smoke training: one JSON line per 25 steps, then a summary; fails unless the
# loss falls at least 10x.
build/foldcore smoke --steps 150 --seed 0 --device cpu --precision fp32
