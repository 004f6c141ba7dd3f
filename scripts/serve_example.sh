#!/usr/bin/env bash
# Starts `foldcore serve` on the bundled example data, as the quickstart predicts it: the parity
# fixture's parameter file (../shared/af2/ref/params.npz: official format, random values, 2
# Evoformer blocks) when present, otherwise random parameters (every output says so). Jobs go to
# out/serve_jobs/. Prints the URL; Ctrl-C (SIGINT) drains and stops.
#   [PORT=8080] scripts/serve_example.sh [other serve options, e.g. --token T]
# Assumes a build (scripts/build.sh) and web/node_modules (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/foldcore ] || { echo "serve_example: build/foldcore not found: run scripts/build.sh first" >&2; exit 1; }
DATA=out/af2_data
mkdir -p "$DATA/params" out/serve_jobs
REF=../shared/af2/ref/params.npz
if [ -f "$REF" ]; then
  ln -sf "$(realpath "$REF")" "$DATA/params/params_model_1_ptm.npz"
  PARAMS=(--data_dir "$DATA")
else
  echo "WARNING: $REF not found: serving with RANDOM parameters (not a real prediction)" >&2
  sed -e 's/^num_evoformer_blocks: .*/num_evoformer_blocks: 2/' -e 's/^num_extra_msa_blocks: .*/num_extra_msa_blocks: 1/' \
    configs/model/model_1_ptm.yaml > "$DATA/model_1_ptm_reduced.yaml"
  PARAMS=(--random_params 0 --model_config "$DATA/model_1_ptm_reduced.yaml")
fi
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
echo "serve_example: paste the example sequence from examples/query73/query.fasta into the page:"
sed -n 2p examples/query73/query.fasta
# exec: the server gets Ctrl-C/SIGTERM directly and drains. Its first line is the URL.
exec build/foldcore serve --jobs_dir out/serve_jobs --model_names model_1_ptm --num_recycles 3 --port "${PORT:-8080}" \
  "${PARAMS[@]}" "$@"
