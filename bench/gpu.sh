#!/usr/bin/env bash
# One GPU session's measurements, each written as JSON into OUT_DIR:
#
#   bash bench/gpu.sh OUT_DIR [SECONDS]
#
# SECONDS (default 560) is the whole session's wall-clock limit: every step has
# its own limit inside it, and the last one (the 300 s tinyshakespeare run) is
# shortened if the earlier ones left less time. GPU time is scarce and may come
# as one try, so a failing step records its exit status and the next one runs.
#
#   env.txt               nvidia-smi, torch and CUDA versions
#   throughput-*.json     bench/throughput.py (eager and torch.compile, MFU, kernels)
#   main-*.json           the main job (`octlm train`, defaults), --compile auto and off
#   resume.json           a run stopped at step 30 and resumed to 60 against one of 60, --deterministic
#   tinyshakespeare.json  bench/train_tinyshakespeare.py (300 s unless the session is short of time)
#   steps.jsonl           each step's exit status and wall seconds
set -u
out=${1:?usage: bash bench/gpu.sh OUT_DIR [SECONDS]}
limit=${2:-560}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
deadline=$(( ${EPOCHREALTIME%.*} + limit ))
work=$(mktemp -d)

# step NAME SECONDS COMMAND...: stdout to NAME.json, stderr to NAME.log, status and time to steps.jsonl
step() {
    local name=$1 seconds=$2 start=$EPOCHREALTIME rc
    shift 2
    timeout "$seconds" "$@" >"$out/$name.json" 2>"$out/$name.log"
    rc=$?
    "$py" -c "import json,sys; print(json.dumps({'step': sys.argv[1], 'rc': int(sys.argv[2]), 'seconds': round(float(sys.argv[4]) - float(sys.argv[3]), 1)}))" \
        "$name" "$rc" "$start" "$EPOCHREALTIME" >>"$out/steps.jsonl"
    echo "$name: exit $rc"
}

{ nvidia-smi; "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"; } >"$out/env.txt" 2>&1

# The model's speed: every scheme eagerly on the Day-1 and GPT-2-small shapes, then torch.compile on RoPE.
step throughput-day1 90 "$py" bench/throughput.py --shapes day1 --warmup 3 --repeats 20 --out "$out/throughput-day1.partial.json"
step throughput-gpt2 90 "$py" bench/throughput.py --shapes gpt2-small --schemes rope learned alibi none --warmup 3 --repeats 10 \
    --out "$out/throughput-gpt2.partial.json"
step throughput-compile 150 "$py" bench/throughput.py --shapes day1 gpt2-small --schemes rope --compile --warmup 3 --repeats 10 \
    --out "$out/throughput-compile.partial.json"

# The main job as the README runs it, with and without torch.compile (auto compiles on CUDA).
step main-auto 90 "$py" -m octlm train --out "$work/main-auto" --json
step main-off 75 "$py" -m octlm train --out "$work/main-off" --compile off --json

# Resume on CUDA: the dropout generator (CUDA's) and the data order must come back; deterministic kernels make it bitwise.
resume_flags=(--text tinyshakespeare --dropout 0.1 --deterministic --compile off --save-every 0 --eval-interval 1000 --sample-tokens 0 --json)
step resume-straight 60 "$py" -m octlm train --out "$work/straight" --max-steps 60 "${resume_flags[@]}"
step resume-first 60 "$py" -m octlm train --out "$work/resumed" --max-steps 30 "${resume_flags[@]}"
step resume-second 60 "$py" -m octlm train --resume "$work/resumed" --max-steps 60 "${resume_flags[@]}"
"$py" - "$work/straight/model.safetensors" "$work/resumed/model.safetensors" >"$out/resume.json" 2>>"$out/resume-second.log" <<'EOF'
import hashlib, json, sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
print(json.dumps({
    "sha256_straight": hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest(),
    "sha256_resumed": hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest(),
    "max_abs_difference": max(float((a[k].float() - b[k].float()).abs().max()) for k in a),
}))
EOF

# Whatever time is left, up to 300 s, for the tinyshakespeare benchmark (its evaluation and sample need about 40 s more).
budget=$(( deadline - ${EPOCHREALTIME%.*} - 45 ))
(( budget > 300 )) && budget=300
if (( budget >= 30 )); then
    step tinyshakespeare $(( budget + 45 )) "$py" bench/train_tinyshakespeare.py --time-budget "$budget"
else
    echo "tinyshakespeare: skipped, only $budget s left" | tee -a "$out/steps.jsonl"
fi
rm -rf "$work"
