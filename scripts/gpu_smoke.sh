#!/usr/bin/env bash
# GPU smoke check: every installed method's quick reproduction with --device cuda, one Markdown table.
#
#   scripts/gpu_smoke.sh [TABLE.md]          # default: results/gpu_smoke.md
#
# Runs `uv sync --locked --all-packages --all-extras` first (the full workspace), then, per installed
# method, `iclr25 reproduce --quick --device cuda --out results/gpu_smoke SLUG` under a per-method time
# limit, sequentially, within a total budget (about 8 minutes on one GPU). While a method runs,
# nvidia-smi is polled: the "device" column says cuda (with the peak GPU memory of its processes)
# only when a process of the run really held GPU memory, else cpu -- methods that cannot use a GPU
# (numpy-only ones) run on the CPU and the table says so.
#
# Environment:
#   ICLR25_DATA          data mirrors (default ../shared/data when present); without them methods
#                        use their fallbacks or fail with a message naming the missing file
#   GPU_SMOKE_BUDGET     total seconds for all runs (default 480); a method that would start with
#                        less than 15 s left is reported "skipped (budget)"
#   GPU_SMOKE_TIMEOUT    limit for a method not in the table below (default 60)
#   GPU_SMOKE_SLUGS      space-separated subset (default: every method `iclr25 list` shows)
#   GPU_SMOKE_DEVICE     device to ask for (default cuda; `cpu` is a dry run of the script itself)
#   GPU_SMOKE_SYNC=0     skip the uv sync (an already synced .venv)
#   ICLR25_CMD           the umbrella command (default .venv/bin/iclr25)
set -uo pipefail
cd "$(dirname "$0")/.."

TABLE=${1:-results/gpu_smoke.md}
RUNS=results/gpu_smoke
BUDGET=${GPU_SMOKE_BUDGET:-480}
DEFAULT_LIMIT=${GPU_SMOKE_TIMEOUT:-60}
DEVICE=${GPU_SMOKE_DEVICE:-cuda}
ICLR25=${ICLR25_CMD:-.venv/bin/iclr25}
PY=.venv/bin/python

# Per-method limits (seconds). The quick runs are sized for <= 3 min on 2 CPU cores; GPU-using
# methods first, so that a spent budget skips the CPU-only ones.
ORDER=(agpd lotos q-adapter vbon mgvga tie ta-dpfl pref-sensitivity air-bench ridge-bias)
declare -A LIMIT=([agpd]=60 [lotos]=75 [q-adapter]=60 [vbon]=60 [mgvga]=75 [tie]=45 [ta-dpfl]=90
                  [pref-sensitivity]=45 [air-bench]=40 [ridge-bias]=45)

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 MPLBACKEND=Agg PYTHONUNBUFFERED=1
if [ -z "${ICLR25_DATA:-}" ] && [ -d ../shared/data ]; then
  ICLR25_DATA="$(cd ../shared/data && pwd)"
  export ICLR25_DATA
fi
echo "ICLR25_DATA=${ICLR25_DATA:-<unset: methods use their fallbacks>}"

if [ "${GPU_SMOKE_SYNC:-1}" != 0 ]; then
  if command -v uv > /dev/null; then UV=(uv); else python3 -m pip install -q uv && UV=(python3 -m uv); fi
  t0=$SECONDS
  "${UV[@]}" sync --locked --all-packages --all-extras || { echo "error: uv sync failed" >&2; exit 2; }
  SYNC_S="$((SECONDS - t0)) s"
else
  SYNC_S="skipped"
fi

if [ "$DEVICE" != cpu ]; then
  command -v nvidia-smi > /dev/null || { echo "error: nvidia-smi not found: no GPU on this machine" >&2; exit 2; }
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'torch sees no CUDA device')" || exit 2
fi
if ! "$ICLR25" reproduce --help 2>&1 | grep -q -- "--device"; then
  echo "error: '$ICLR25 reproduce' has no --device flag (it comes with the core's shared CLI conventions)" >&2
  exit 2
fi

read -r -a INSTALLED <<< "$("$ICLR25" list | awk 'NF >= 3 {print $1}' | tr '\n' ' ')"
if [ -n "${GPU_SMOKE_SLUGS:-}" ]; then read -r -a WANT <<< "$GPU_SMOKE_SLUGS"; else WANT=("${INSTALLED[@]}"); fi
SLUGS=()
for s in "${ORDER[@]}"; do [[ " ${WANT[*]} " == *" $s "* ]] && SLUGS+=("$s"); done
for s in "${WANT[@]}"; do [[ " ${ORDER[*]} " == *" $s "* ]] || SLUGS+=("$s"); done
[ ${#SLUGS[@]} -gt 0 ] || { echo "error: no installed methods" >&2; exit 2; }

GPU_NAME=$( [ "$DEVICE" != cpu ] && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1 || echo "none (dry run on cpu)")
mkdir -p "$RUNS" "$(dirname "$TABLE")"

# poll the GPU memory held by compute processes while one method runs: prints the peak (MiB)
poll_gpu() {
  local peak=0 used
  while :; do
    used=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits 2>/dev/null \
           | awk '{s += $1} END {print s + 0}')
    [ "${used:-0}" -gt "$peak" ] && peak=$used && echo "$peak" > "$1"
    sleep 1
  done
}

rows=()
spent=0
holding=0
total=0
for slug in "${SLUGS[@]}"; do
  limit=${LIMIT[$slug]:-$DEFAULT_LIMIT}
  left=$((BUDGET - spent))
  if [ "$left" -lt 15 ]; then
    rows+=("| $slug | - | - | - | skipped (budget of ${BUDGET} s spent) |")
    continue
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  rm -rf "${RUNS:?}/$slug"
  peak_file=$(mktemp)
  echo 0 > "$peak_file"
  poller=""
  if [ "$DEVICE" != cpu ]; then
    poll_gpu "$peak_file" &
    poller=$!
  fi
  echo "== $slug (limit ${limit} s)"
  t0=$(date +%s.%N)
  timeout --signal=TERM --kill-after=15 "$limit" \
    "$ICLR25" reproduce --quick --device "$DEVICE" --out "$RUNS" "$slug" > "$RUNS/$slug.log" 2>&1
  rc=$?
  wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  [ -n "$poller" ] && kill "$poller" 2> /dev/null && wait "$poller" 2> /dev/null
  peak=$(cat "$peak_file"); rm -f "$peak_file"
  spent=$((spent + ${wall%.*} + 1))
  if [ "$peak" -gt 0 ]; then used="cuda (peak ${peak} MiB)"; else used="cpu"; fi
  claims=$("$PY" - "$RUNS/$slug/results.json" <<'EOF'
import json, sys
try:
    claims = json.load(open(sys.argv[1]))["claims"]
except (OSError, ValueError, KeyError):
    print("-")
else:
    print(f"{sum(bool(c.get('holds')) for c in claims)}/{len(claims)}")
EOF
)
  case $rc in
    0) status="ok" ;;
    124|137) status="timeout (${limit} s)" ;;
    *) status="exit $rc (see $RUNS/$slug.log)" ;;
  esac
  if [[ $claims == */* ]]; then holding=$((holding + ${claims%/*})); total=$((total + ${claims#*/})); fi
  rows+=("| $slug | $used | $wall | $claims | $status |")
  echo "   $used, $wall s, claims $claims, $status"
done

{
  echo "## GPU smoke check"
  echo
  echo "$(date -u +%Y-%m-%d) on ${GPU_NAME}; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?');"
  echo "\`scripts/gpu_smoke.sh\` (\`iclr25 reproduce --quick --device $DEVICE SLUG\` per method; uv sync ${SYNC_S};"
  echo "runs ${spent} s of a ${BUDGET} s budget). Claims holding in total: ${holding}/${total}."
  echo
  echo "| slug | device used | wall (s) | claims (k/n) | exit status |"
  echo "| --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} > "$TABLE"
cat "$TABLE"
echo "table written to $TABLE"
