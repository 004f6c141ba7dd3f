#!/usr/bin/env bash
# One command from a fresh machine: install, build, run the main job on examples/.
# Until `foldcore predict` lands, the main job is the Transformer-core smoke training.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
mkdir -p out
build/foldcore info
