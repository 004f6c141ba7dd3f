#!/usr/bin/env bash
# Fuzzes the data-pipeline parsers with libFuzzer (+ AddressSanitizer, UndefinedBehaviorSanitizer).
#
#   scripts/fuzz.sh [seconds-per-target]      (default 60)
#
# Builds fuzz/ (standalone CMake project, clang) in build-fuzz/, makes seed corpora from the shared
# test data (../shared/data, or $FOLDCORE_SHARED_DIR/data) in build-fuzz/corpus/<target>, then runs
# every target for the given time, FUZZ_PARALLEL (default: min(2, nproc)) at a time. A crash,
# sanitizer report, leak, hang (> 10 s on one input) or out-of-memory (> 2 GiB) is a finding: the
# script prints the saved input and the command that reproduces it, and exits 1.
# FUZZ_TARGETS="fasta a3m" restricts the run to those targets.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECONDS_PER_TARGET=${1:-60}
BUILD=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
DATA=${FOLDCORE_SHARED_DIR:-$ROOT/../shared}/data
TARGETS=${FUZZ_TARGETS:-fasta a3m stockholm hhr mmcif pdb npy}
NPROC=$(nproc)
PARALLEL=${FUZZ_PARALLEL:-$((NPROC < 2 ? NPROC : 2))}

if ! [[ $SECONDS_PER_TARGET =~ ^[0-9]+$ ]] || ((SECONDS_PER_TARGET < 1)); then
  echo "usage: scripts/fuzz.sh [seconds-per-target >= 1]" >&2
  exit 2
fi
CXX_FUZZ=${FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}
if [[ -z $CXX_FUZZ ]]; then
  echo "fuzz.sh: clang++ not found (libFuzzer needs clang and libclang-rt-dev)" >&2
  exit 2
fi

# ---------------------------------------------------------------- build
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S fuzz -B "$BUILD" "${generator[@]}" -DCMAKE_CXX_COMPILER="$CXX_FUZZ" "${launcher[@]}" >/dev/null
cmake --build "$BUILD" -j "$NPROC"

# ---------------------------------------------------------------- seed corpora
# Small files are copied whole; big ones contribute a prefix cut at a line end (text) so the
# fuzzer spends its time on structure rather than on megabytes of similar rows.
CORPUS=$BUILD/corpus
SEED_BYTES=16384

seed_name() {  # data/query73/alignments/x.sto -> query73_alignments_x.sto
  local rel=${1#"$DATA"/}
  echo "${rel//\//_}"
}

seed() {  # seed <target> <file>...: copies each existing file (or its prefix) into the corpus
  local target=$1 f out
  shift
  mkdir -p "$CORPUS/$target"
  for f in "$@"; do
    [[ -f $f ]] || continue
    out="$CORPUS/$target/seed_$(seed_name "$f")"
    if (($(stat -c %s "$f") <= SEED_BYTES)); then
      cp "$f" "$out"
    else
      head -c "$SEED_BYTES" "$f" | sed '$d' >"$out"  # drop the cut last line
    fi
  done
}

# mmCIF seeds keep every category but only the first rows of each loop whose rows are one line
# (atom_site, entity_poly_seq, ...): a whole small structure, header to atoms, in a few KiB.
seed_cif() {
  local f out
  mkdir -p "$CORPUS/mmcif"
  for f in "$@"; do
    [[ -f $f ]] || continue
    out="$CORPUS/mmcif/seed_short_$(seed_name "$f")"
    awk '
      /^loop_/ { in_loop = 1; ncols = 0; rows = 0; print; next }
      in_loop && /^_/ && rows == 0 { ncols++; print; next }
      /^#/ || /^data_/ { in_loop = 0; print; next }
      in_loop && NF == ncols { rows++; if (rows <= 12) print; next }
      { if (/^_/) in_loop = 0; print }
    ' "$f" >"$out"
    truncate -s '<65536' "$out"
  done
}

mkdir -p "$CORPUS"
seed fasta "$DATA"/query73/query.fasta "$DATA"/6kwc/6kwc.fasta "$DATA"/query73/alignments/bfd_uniclust_hits.a3m
seed a3m "$DATA"/2q2k_A/alignments/*.a3m "$DATA"/query73/alignments/*.a3m "$DATA"/6kwc/*.a3m
seed stockholm "$DATA"/2q2k_A/alignments/*.sto "$DATA"/query73/alignments/*.sto
seed hhr "$DATA"/query73/alignments/*.hhr "$DATA"/6kwc/*.hhr
seed_cif "$DATA"/mmcifs/*.cif
seed mmcif "$DATA"/mmcifs/3zee.cif
seed pdb "$DATA"/pdb/*.pdb "$DATA"/6kwc/*.pdb
seed npy "$DATA"/query73/*.npz
if command -v unzip >/dev/null; then  # every array of the feature dict as its own .npy seed
  for f in "$DATA"/query73/*.npz; do
    [[ -f $f ]] || continue
    for entry in $(unzip -Z1 "$f"); do
      unzip -p "$f" "$entry" >"$CORPUS/npy/seed_$entry"
      truncate -s '<65536' "$CORPUS/npy/seed_$entry"
    done
  done
fi
for t in $TARGETS; do mkdir -p "$CORPUS/$t"; done

# ---------------------------------------------------------------- fuzzing
FINDINGS=$BUILD/findings
LOGS=$BUILD/logs
mkdir -p "$FINDINGS" "$LOGS"

run_target() {  # run_target <target>: fuzzes one target; libFuzzer's exit status goes to <target>.rc
  local t=$1 rc=0
  mkdir -p "$FINDINGS/$t"
  local dict=()
  [[ -f fuzz/dict/$t.dict ]] && dict=(-dict="fuzz/dict/$t.dict")
  # fuzz/regressions/<target>/ (inputs of fixed findings) is a second, read-only corpus: libFuzzer
  # runs every input of it first, so a regression fails the run at once.
  local regressions=()
  [[ -d fuzz/regressions/$t ]] && regressions=("fuzz/regressions/$t")
  "$BUILD/fuzz_$t" "$CORPUS/$t" "${regressions[@]}" "${dict[@]}" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$FINDINGS/$t/" \
    >"$LOGS/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$LOGS/$t.rc"
}

for t in $TARGETS; do
  while (($(jobs -rp | wc -l) >= PARALLEL)); do wait -n || true; done
  echo "fuzz: $t for ${SECONDS_PER_TARGET}s (log: $LOGS/$t.log)"
  rm -f "$LOGS/$t.rc"
  run_target "$t" &
done
wait

failed=0
for t in $TARGETS; do
  if [[ $(cat "$LOGS/$t.rc" 2>/dev/null) == 0 ]]; then
    echo "fuzz: $t ok ($(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$LOGS/$t.log" | awk '{print $2}') runs)"
  else
    failed=1
    echo "fuzz: FINDING in $t; log $LOGS/$t.log:" >&2
    grep -E 'ERROR: |SUMMARY: |runtime error|fuzz property violated|Test unit written' "$LOGS/$t.log" | head -20 >&2 || true
    artifact=$(grep -o "Test unit written to [^ ]*" "$LOGS/$t.log" | tail -1 | sed 's/Test unit written to //')
    if [[ -n $artifact ]]; then
      echo "  input:     $artifact" >&2
      echo "  reproduce: $BUILD/fuzz_$t $artifact" >&2
    fi
  fi
done
exit $failed
