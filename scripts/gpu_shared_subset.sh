#!/usr/bin/env bash
# Copies into ./shared (DST) the part of the shared data (SRC, default ../shared) that the GPU tests
# and benchmarks read, for a GPU machine that gets the repository and little else: about 36 MB
# instead of 90. gpu_check.sh finds ./shared by itself (FOLDCORE_SHARED_DIR=./shared). What goes:
#   af2/params_manifest_model_1_ptm.txt, af2/ref/{params,features,outputs}.{npz,json}, README.md;
#   af2/ref/modules.npz cut to the arrays the GPU template test reads (evo_m, evo_msa_mask, extra_z);
#   af2/ref/train/{batch.npz,losses.json,outputs.npz,README.md} (the training-step and loss tests;
#   grads.npz, 26 MB, only the CPU parity test reads);
#   data/mmcifs/2q2k.cif and data/2q2k_A/ (bench_train builds its sample from 2q2k's chain A).
#   scripts/gpu_shared_subset.sh [SRC [DST]]
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-../shared}
DST=${2:-shared}
die() { echo "gpu_shared_subset: $1" >&2; exit 1; }
[ -d "$SRC/af2/ref" ] || die "no shared data at $SRC (expected $SRC/af2/ref)"
command -v python3 >/dev/null 2>&1 || die "python3 is needed to cut modules.npz"
# Into a fresh folder beside DST first, so a failure leaves no half-made copy.
TMP=$(mktemp -d "${DST%/}.tmp.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/af2/ref/train" "$TMP/data/mmcifs"
cp "$SRC/DESIGN.md" "$TMP/" 2>/dev/null || true
cp "$SRC/af2/params_manifest_model_1_ptm.txt" "$TMP/af2/"
for f in README.md params.npz params.json features.npz features.json outputs.npz outputs.json; do
  cp "$SRC/af2/ref/$f" "$TMP/af2/ref/"
done
for f in README.md batch.npz losses.json outputs.npz; do cp "$SRC/af2/ref/train/$f" "$TMP/af2/ref/train/"; done
cp "$SRC/data/mmcifs/2q2k.cif" "$TMP/data/mmcifs/"
cp -r "$SRC/data/2q2k_A" "$TMP/data/"
python3 - "$SRC/af2/ref/modules.npz" "$TMP/af2/ref/modules.npz" <<'EOF'
import sys, zipfile
keep = ["evo_m.npy", "evo_msa_mask.npy", "extra_z.npy"]
with zipfile.ZipFile(sys.argv[1]) as src, zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as dst:
    names = set(src.namelist())
    missing = [n for n in keep if n not in names]
    if missing:
        sys.exit("gpu_shared_subset: %s lacks %s" % (sys.argv[1], ", ".join(missing)))
    for n in keep:
        dst.writestr(n, src.read(n))
EOF
rm -rf "$DST"
mv "$TMP" "$DST"
trap - EXIT
echo "gpu_shared_subset: $(du -sb "$DST" | cut -f1) bytes in $DST"
