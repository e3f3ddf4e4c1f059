#!/usr/bin/env bash
# One scripted validation run on a single GPU (written for one H200; about 5-8 minutes):
#   probe the device -> validate llama-3.1-8b (dense) and qwen3-30b-a3b (MoE) at their real layer dimensions
#   against the shipped h200-sxm spec -> calibrate that spec from each report -> a 2-GPU NCCL check if present.
# Everything lands in one folder: $1, default results/gpu-<date>.
#
# A GPU box may lack pydantic & co: cp312 wheels placed in .whl/ (pip download --only-binary=:all: ...) are
# installed to a private folder first. Runs from any directory; PYTHONPATH points at this checkout.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/results/gpu-$(date +%Y-%m-%d)}"
HW="${DSDSIM_GPU_SPEC:-h200-sxm}"          # the spec predictions are made with (and calibrated)
MODELS="${DSDSIM_GPU_MODELS:-llama-3.1-8b qwen3-30b-a3b}"
QUICK="${DSDSIM_GPU_QUICK:+--quick}"      # DSDSIM_GPU_QUICK=1: the small grid (a first, cheaper try)
mkdir -p "$OUT"

SITE="${TMPDIR:-/tmp}/dsdsim-site"
if compgen -G "$ROOT/.whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$ROOT"/.whl/*.whl
  export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/log.txt") 2>&1

echo "== $(date -u +%FT%TZ) dsdsim GPU validation -> $OUT"
python3 - <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO GPU")
PY
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv > "$OUT/nvidia-smi.csv" 2>/dev/null || true

SECONDS=0
echo "== probe"
python3 -m dsdsim.bench.probe --device cuda --output "$OUT/probe-cuda.yaml"
echo "   probe done at ${SECONDS}s"

for MODEL in $MODELS; do
  echo "== validate $MODEL on $HW (real layer dimensions)"
  python3 -m dsdsim.bench.validate --model "$MODEL" --hardware "$HW" --device cuda --reduce 1 $QUICK \
      --output "$OUT/$MODEL" --no-progress
  echo "== calibrate $HW from $MODEL"
  python3 -m dsdsim.bench.calibrate --report "$OUT/$MODEL/report.json" --hardware "$HW" \
      --output "$OUT/$MODEL/$HW-calibrated.yaml" --name "$HW-calibrated-$MODEL"
  echo "   $MODEL done at ${SECONDS}s"
done

if [ "$(python3 -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
  echo "== 2-GPU NCCL all-reduce and tensor-parallel MLP"
  python3 -m dsdsim.bench.distributed --backend nccl --world-size 2 --hardware "$OUT/probe-cuda.yaml" \
      --output "$OUT/distributed.json"
fi
echo "== done in ${SECONDS}s; files:"
ls -la "$OUT"
