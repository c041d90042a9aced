#!/usr/bin/env bash
# The accelerator figures listed as pending in docs/known_gaps.md, "Accelerators", in one
# command for a GPU machine, most wanted first. Each step has its own time limit, prints as it
# goes and writes its output to DIR/<step>.txt, so a run cut short keeps every step it finished.
#
#   bash benchmarks/gpu_pending.sh [DIR [STEP ...]]     # DIR default: results/benchmarks/pending
#   bash benchmarks/gpu_pending.sh /tmp/out check paths  # chosen steps only
#
# Steps (limits in seconds; LIMIT_SCALE=2 doubles them):
#   device   the device, jax and XLA_FLAGS                                                   30
#   ops      `hlo_ops.py --local_step`: one local step's operations (kernels) in the GPU's
#            optimised program, map and vmap, float32 and bfloat16 (no timing)               90
#   check    `accelerator.py --check` for the algorithms added since the last GPU check
#            (FedGF, FedSWA, FedMoSWA, FedWMSAM, FedNSAM, DP-FedSAM; FedAvg as the baseline),
#            every client strategy                                                          240
#   targets  `accelerator.py --big --sections 0,2,3,4 --sweep_rounds 20`: the default round,
#            the per-algorithm cost, 100 clients, the sweeps (now run back to back with map
#            clients), ResNet-18 GN and VGG-11 GN                                          300
#   paths    the map / vmap crossover for the models other than the McMahan CNN (LeNet-5,
#            ResNet-8, VGG-11 GN) at 10 and 32 clients                                       240
#   analysis `analysis.py` (lambda_max, trace, SAM sharpness, landscape) on the GPU            240
#
# Without a GPU it runs on the CPU, but the figures are then the CPU's (and slow); SMALL=1 runs
# every step on tiny shapes (a dry run of the commands, seconds to minutes on a CPU).
# PY (default: python) is the interpreter. Where ml_collections is not installed (a bare JAX
# image), a wheel in WHEELS (default: .whl; fill it with `pip download --no-deps
# ml-collections -d .whl` on a machine with network) is installed first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/benchmarks/pending}
shift || true
STEPS=${*:-device ops check targets paths analysis}
PY=${PY:-python}
SCALE=${LIMIT_SCALE:-1}
ACC=() PATHS=(--rounds 3) ANALYSIS=()
if [ "${SMALL:-0}" = 1 ]; then
  ACC=(--small) PATHS=(--rounds 1 --steps 2 --batch 4)
  ANALYSIS=(--data digits --examples 100 --iters 2 --probes 2 --grid 3 --parts lambda,landscape)
fi
for s in $STEPS; do   # refuse a misspelt step before any step spends device time
  case $s in device|ops|check|targets|paths|analysis) ;;
    *) echo "unknown step '$s' (device, ops, check, targets, paths, analysis)" >&2; exit 2;;
  esac
done
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PY" -c "import ml_collections" 2>/dev/null; then
  "$PY" -m pip install --quiet --no-deps "${WHEELS:-.whl}"/ml_collections-*.whl \
    || { echo "ml_collections is missing and no wheel was found in ${WHEELS:-.whl}" >&2; exit 2; }
fi

step() {   # step NAME LIMIT COMMAND...
  local name=$1 limit=$(( $2 * SCALE )) start=$SECONDS rc
  shift 2
  echo "## $name (limit ${limit} s)"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.txt"
  rc=${PIPESTATUS[0]}
  echo "## $name: exit $rc after $(( SECONDS - start )) s" | tee -a "$OUT/$name.txt"
}

for s in $STEPS; do
  case $s in
    device)
      step device 30 "$PY" -c "import jax, os; d = jax.devices(); print(jax.default_backend(), \
d[0].device_kind, len(d), 'devices; jax', jax.__version__, '; XLA_FLAGS=' + repr(os.environ.get('XLA_FLAGS', '')))";;
    ops)
      if [ "${SMALL:-0}" = 1 ]; then OPS=(--clients=2 --steps=2 --batch=2 --input=8x8x1)
      else OPS=(--clients=4 --steps=3 --batch=8 --input=32x32x3); fi
      step ops 90 "$PY" benchmarks/hlo_ops.py --local_step "${OPS[@]}";;
    check)
      step check 240 "$PY" benchmarks/accelerator.py --check \
        --algorithms=fedavg,fedgf,fedswa,fedmoswa,fedwmsam,fednsam,dp_fedsam "${ACC[@]}";;
    targets)
      step targets 300 "$PY" benchmarks/accelerator.py --big --sections 0,2,3,4 --rounds 3 \
        --sweep_rounds 20 "${ACC[@]}";;
    paths)
      v=""
      for m in lenet5 resnet8 vgg11_gn; do
        for c in 10 32; do
          v="$v;fedavg:map/rolled:xla:bfloat16:$c:$m;fedavg:vmap/rolled:xla:bfloat16:$c:$m"
        done
      done
      step paths 240 "$PY" benchmarks/paths.py "${v#;}" "${PATHS[@]}";;
    analysis)
      step analysis 240 "$PY" benchmarks/analysis.py "${ANALYSIS[@]}";;
  esac
done
