#!/usr/bin/env bash
# One scripted validation run on a single GPU, written to fit a few minutes of rented GPU time (about 5 minutes on an H200):
#   preflight -> probe the device -> validate llama-3.1-8b (dense, full size) and qwen3-30b-a3b (MoE, real
#   widths, first layers only) against the shipped spec -> calibrate the spec from each report -> the real
#   speculative loop -> a world-size-1 NCCL check -> one archive of everything.
#
#   scripts/validate_gpu.sh OUT_DIR [ARCHIVE]        (ARCHIVE default: OUT_DIR.tar.gz)
#
# Every stage is a `dsdsim` command with its own time limit; a stage that fails is logged and the run goes on,
# and the archive is written whatever happened (a remote run may bring back only a few files). Progress lines
# go to OUT_DIR/log.txt as the run goes. Environment knobs: DSDSIM_GPU_SPEC (spec predictions use, default
# h200-sxm), DSDSIM_DEVICE (default cuda), DSDSIM_GPU_GRID (gpu | quick | tiny; tiny is the CPU test of this
# script), DSDSIM_GPU_BUDGET_S (seconds for the two validations together, default 330), DSDSIM_REDUCE (width
# divisor, default 1: real layers), DSDSIM_DENSE_LAYERS / DSDSIM_MOE_LAYERS (layers kept: all / 8).
#
# A GPU box may lack pydantic & co: cp312 wheels placed in .whl/ (pip download --only-binary=:all: ...) are
# installed to a private folder first. Runs from any directory; PYTHONPATH points at this checkout.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:?usage: scripts/validate_gpu.sh OUT_DIR [ARCHIVE]}"
ARCHIVE="${2:-${OUT%/}.tar.gz}"
HW="${DSDSIM_GPU_SPEC:-h200-sxm}"
DEVICE="${DSDSIM_DEVICE:-cuda}"
GRID="${DSDSIM_GPU_GRID:-gpu}"
BUDGET="${DSDSIM_GPU_BUDGET_S:-330}"
REDUCE="${DSDSIM_REDUCE:-1}"
DENSE_LAYERS=(); [ -n "${DSDSIM_DENSE_LAYERS:-}" ] && DENSE_LAYERS=(--layers "$DSDSIM_DENSE_LAYERS")
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/log.txt"
: > "$LOG"

log() { echo "== $(date -u +%H:%M:%S) [${SECONDS}s] $*" | tee -a "$LOG"; }

pack() {
  log "packing $ARCHIVE"
  sed -i "s#$ROOT/##g" "$LOG" 2>/dev/null || true     # paths in warnings and tracebacks: relative to the checkout
  tar -C "$(dirname "$OUT")" -czf "$ARCHIVE" "$(basename "$OUT")" 2>>"$LOG" || echo "archive failed" >>"$LOG"
}
trap pack EXIT

SITE="${TMPDIR:-/tmp}/dsdsim-site"
if compgen -G "$ROOT/.whl/*.whl" > /dev/null; then
  log "installing $(ls "$ROOT"/.whl/*.whl | wc -l) carried wheels into $SITE"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$ROOT"/.whl/*.whl >>"$LOG" 2>&1 || log "wheel install failed (see above)"
  export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
DSDSIM=(python3 -m dsdsim)

# stage NAME LIMIT_S COMMAND...: run with a time limit, output appended to the log, failure logged, never fatal
stage() {
  local name="$1" limit="$2"; shift 2
  log "$name: $*"
  timeout --signal=TERM --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then log "$name: ok"; else log "$name: FAILED (exit $rc)"; fi
  echo "$name $rc" >> "$OUT/stages.txt"
  return 0
}

log "dsdsim GPU validation -> $OUT (spec $HW, device $DEVICE, grid $GRID)"
if ! python3 "$ROOT/dsdsim/bench/preflight.py" --device "$DEVICE" 2>&1 | tee -a "$LOG" | grep -q '^preflight ok'; then
  log "preflight failed: nothing measured"
  exit 3
fi
(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.sm,power.limit,driver_version --format=csv \
  > "$OUT/nvidia-smi.csv") 2>>"$LOG" || true

PROBE="$OUT/probe/$HW@measured.yaml"
mkdir -p "$OUT/probe"
PROBE_QUICK=(); [ -n "${DSDSIM_PROBE_QUICK:-}" ] && PROBE_QUICK=(--quick)
stage probe 90 "${DSDSIM[@]}" probe --device "$DEVICE" --name "$HW@measured" "${PROBE_QUICK[@]}" -o "$PROBE"

# A dry run on a CPU calibrates the GPU spec only to exercise the path: calibrate refuses that unless asked.
OTHER_DEVICE=(); case "$DEVICE" in cpu*) OTHER_DEVICE=(--allow-other-device) ;; esac

half=$((BUDGET * 55 / 100))
rest=$((BUDGET - half))
stage validate-llama-3.1-8b $((half + 60)) "${DSDSIM[@]}" validate -m llama-3.1-8b -g "$HW" --device "$DEVICE" \
    --grid "$GRID" --reduce "$REDUCE" "${DENSE_LAYERS[@]}" --time-budget "$half" -o "$OUT/llama-3.1-8b"
stage calibrate-llama-3.1-8b 60 "${DSDSIM[@]}" calibrate -r "$OUT/llama-3.1-8b/report.json" -g "$HW" \
    -o "$OUT/llama-3.1-8b/$HW-calibrated.yaml" --name "$HW-calibrated-llama-3.1-8b" "${OTHER_DEVICE[@]}"

stage validate-qwen3-30b-a3b $((rest + 60)) "${DSDSIM[@]}" validate -m qwen3-30b-a3b -g "$HW" --device "$DEVICE" \
    --grid "$GRID" --reduce "$REDUCE" --layers "${DSDSIM_MOE_LAYERS:-8}" --time-budget "$rest" -o "$OUT/qwen3-30b-a3b"
stage calibrate-qwen3-30b-a3b 60 "${DSDSIM[@]}" calibrate -r "$OUT/qwen3-30b-a3b/report.json" -g "$HW" \
    -o "$OUT/qwen3-30b-a3b/$HW-calibrated.yaml" --name "$HW-calibrated-qwen3-30b-a3b" "${OTHER_DEVICE[@]}"

stage loop 60 "${DSDSIM[@]}" loop --device "$DEVICE" -k 4 -b 32 --new-tokens 64 -o "$OUT/loop.json"
stage comm-check 60 "${DSDSIM[@]}" comm-check --backend "$([ "${DEVICE%%:*}" = cuda ] && echo nccl || echo gloo)" \
    --device "$DEVICE" -o "$OUT/comm_check.json"

log "done; files:"
(cd "$OUT" && find . -type f | sort) | tee -a "$LOG"
