#!/usr/bin/env bash
# One command from a fresh machine: install, build, run the main job on examples/.
# First the Transformer-core smoke training, then the main job: an AlphaFold2 prediction of the
# example target examples/query73 (73 residues, precomputed alignments) with `foldcore predict`.
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

# AlphaFold2 prediction. The official weights cannot be downloaded here: use the reference
# parameter file of the parity fixtures (model_1_ptm at full width, 2 Evoformer blocks) when it
# is present, else random parameters (every output then says so, loudly).
PRED=out/predict
DATA=out/af2_data
rm -rf "$PRED/query" && mkdir -p "$PRED/query" "$DATA/params"
cp -r examples/query73/msas "$PRED/query/msas"
REF=../shared/af2/ref/params.npz
if [ -f "$REF" ]; then
  ln -sf "$(realpath "$REF")" "$DATA/params/params_model_1_ptm.npz"
  PARAMS=(--data_dir "$DATA")
else
  echo "WARNING: $REF not found: predicting with RANDOM parameters (not a real prediction)" >&2
  # The model_1_ptm architecture at the reference depth (2 Evoformer blocks, 1 extra-MSA block)
  # keeps this within minutes on 2 CPU cores.
  sed -e 's/^num_evoformer_blocks: .*/num_evoformer_blocks: 2/' -e 's/^num_extra_msa_blocks: .*/num_extra_msa_blocks: 1/' \
    configs/model/model_1_ptm.yaml > "$DATA/model_1_ptm_reduced.yaml"
  PARAMS=(--random_params 0 --model_config "$DATA/model_1_ptm_reduced.yaml")
fi
build/foldcore predict --fasta_paths examples/query73/query.fasta --output_dir "$PRED" \
  --model_names model_1_ptm --use_precomputed_msas --num_recycles 3 --random_seed 0 --device cpu "${PARAMS[@]}"
ls "$PRED/query"
cat "$PRED/query/ranking_debug.json"
