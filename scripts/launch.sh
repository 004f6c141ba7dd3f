#!/usr/bin/env bash
# Launches a distributed foldcore job (train --dp/--dap/--bp, bert --dp) with the right launcher:
# srun inside a Slurm allocation, else Open MPI's mpirun (one node, or several with --hostfile).
#
#   scripts/launch.sh -n 8 -- train --config configs/train/initial.yaml --store S.h5 --out_dir RUN \
#       --device cuda --dp 8
#   scripts/launch.sh -n 16 --hostfile hosts -- train … --device cuda --dp 16
#   scripts/launch.sh --dry-run -n 2 -- train … --dp 2      # print the command only
#
# Options (before --):
#   -n N             processes (default: $SLURM_NTASKS inside Slurm, else 1); must equal dp·dap·bp
#   --hostfile F     Open MPI hostfile (lines "node1 slots=8"); ranks fill each host's slots in turn
#   --threads T      OpenMP threads per rank (default: cores of this node / ranks on it, at least 1)
#   --timeout S      FOLDCORE_COMM_TIMEOUT_S: a collective stuck this long ends the job (default 600)
#   --launcher L     mpirun or srun (default: srun when SLURM_JOB_ID is set and srun exists)
#   --binary B       the foldcore program (default: build/foldcore next to this script's repo)
#   --dry-run        print the command instead of running it
# Environment passed to every rank: OMP_NUM_THREADS, FOLDCORE_*, NCCL_*, UCX_*, CUDA_VISIBLE_DEVICES
# (mpirun: -x for each; srun exports the environment itself). Each rank drives the GPU of its local
# rank (local_rank mod visible GPUs), so start one rank per GPU and leave CUDA_VISIBLE_DEVICES
# alone unless a node has GPUs to hide.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
np="" hostfile="" threads="" timeout_s="${FOLDCORE_COMM_TIMEOUT_S:-600}" launcher="" dry=0
binary="$repo/build/foldcore"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n|-np) np="$2"; shift 2 ;;
    --hostfile) hostfile="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --launcher) launcher="$2"; shift 2 ;;
    --binary) binary="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "launch.sh: unknown option '$1' (foldcore's arguments go after --)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "launch.sh: no foldcore command after -- (e.g. -- train --config …)" >&2; exit 2; }
if [[ -z "$launcher" ]]; then
  if [[ -n "${SLURM_JOB_ID:-}" ]] && command -v srun > /dev/null; then launcher=srun; else launcher=mpirun; fi
fi
[[ -n "$np" ]] || np="${SLURM_NTASKS:-1}"
[[ "$np" =~ ^[1-9][0-9]*$ ]] || { echo "launch.sh: -n '$np' is not a positive number" >&2; exit 2; }
[[ -x "$binary" || $dry -eq 1 ]] || { echo "launch.sh: $binary is not built (scripts/build.sh)" >&2; exit 2; }

# The grid must match the process count: dp·dap·bp from the foldcore arguments.
dp=1 dap=1 bp=1 prev=""
for a in "$@"; do
  case "$prev" in --dp) dp="$a" ;; --dap) dap="$a" ;; --bp) bp="$a" ;; esac
  prev="$a"
done
if (( dp * dap * bp != np )); then
  echo "launch.sh: -n $np processes but --dp $dp --dap $dap --bp $bp make a grid of $((dp * dap * bp))" >&2
  exit 2
fi

# OpenMP threads per rank: this node's cores shared by the ranks on it.
if [[ -z "$threads" ]]; then
  cores=$(nproc)
  per_node="${SLURM_NTASKS_PER_NODE:-$np}"
  [[ -n "$hostfile" ]] && per_node=$(awk '/slots=/{split($0,a,"slots="); print a[2]+0; exit}' "$hostfile")
  [[ -n "$per_node" && "$per_node" -gt 0 ]] || per_node=$np
  threads=$(( cores / per_node )); (( threads >= 1 )) || threads=1
fi
export OMP_NUM_THREADS="$threads" FOLDCORE_COMM_TIMEOUT_S="$timeout_s"

if [[ "$launcher" == srun ]]; then
  # One task per rank, one GPU per task when the allocation has GPUs; Slurm's PMIx starts MPI.
  cmd=(srun --ntasks "$np" --cpus-per-task "$threads" --kill-on-bad-exit=1 "$binary" "$@")
else
  cmd=(mpirun -np "$np" --map-by slot --bind-to none)
  [[ -n "$hostfile" ]] && cmd+=(--hostfile "$hostfile")
  [[ $(id -u) -eq 0 ]] && cmd+=(--allow-run-as-root)
  (( np > $(nproc) )) && [[ -z "$hostfile" ]] && cmd+=(--oversubscribe)
  for v in $(compgen -e | grep -E '^(OMP_NUM_THREADS|FOLDCORE_|NCCL_|UCX_|CUDA_VISIBLE_DEVICES$)' || true); do
    cmd+=(-x "$v")
  done
  cmd+=("$binary" "$@")
fi
echo "launch.sh: ${cmd[*]}" >&2
(( dry )) && exit 0
exec "${cmd[@]}"
