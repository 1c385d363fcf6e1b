#!/bin/bash
# One device session: calibrate on CUDA, the hardware loop, and a sweep of one-GPU executions.
set -u
export PYTHONUNBUFFERED=1
DEV=${DEV:-cuda}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
LOG=$OUT/log.txt
if [ -d .whl ] && [ "${NOWHL:-0}" = 0 ]; then python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >>$LOG 2>&1 || { echo pip failed; tail $LOG; exit 3; }; export PYTHONPATH=$PWD:/tmp/site; else export PYTHONPATH=$PWD; fi
T0=$(date +%s)
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; python3 -c "import torch,sys;print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'nocuda', sys.version)"; lscpu | grep -E "Model name|^CPU\(s\)|Thread"; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
GPU=$(python3 -c "import torch;print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')")
case "$GPU" in *H200*) CL=hgx-h200;; *H100*) CL=dgx-h100;; *) CL=cpu-host;; esac
echo "cluster $CL" | tee -a $LOG
PROF=$OUT/profile_$DEV.json
timeout ${CAL_T:-200} python3 -m trainsim.cli.main calibrate --device $DEV --quick --nproc 1 --out $PROF >>$LOG 2>&1; echo "calibrate rc=$? at $(( $(date +%s)-T0 )) s"
sed "s/^cluster: .*/cluster: $CL/" benchmarks/hardware_plans/cuda_one_gpu.yaml > /tmp/plan.yaml
timeout ${LOOP_T:-150} python3 benchmarks/hardware_loop.py --device $DEV --plan /tmp/plan.yaml $( [ -f $PROF ] && echo --profile $PROF || echo --no-microbench ) --out $OUT/hardware_loop_$DEV.json >>$LOG 2>&1; echo "loop rc=$? at $(( $(date +%s)-T0 )) s"
tail -2 $LOG
# name layers hidden heads ffn seq mb gb recompute
while read -r name L H NH F S MB GB RC; do
  [ -z "$name" ] && continue
  printf "model: {name: %s, num_layers: %s, hidden: %s, num_heads: %s, ffn_hidden: %s, vocab_size: 50304, max_seq_len: %s}\ncluster: %s\ngpus: 1\nlayout: {tp: 1, pp: 1, dp: 1}\ntraining: {seq_len: %s, global_batch: %s, micro_batch: %s, dtype: %s, recompute: %s, framework: torch}\n" \
    $name $L $H $NH $F $S $CL $S $GB $MB ${DTYPE:-bf16} $RC > /tmp/s_$name.yaml
  timeout ${EX_T:-60} python3 -m trainsim.cli.main execute /tmp/s_$name.yaml --device $DEV --steps ${STEPS:-6} --json $( [ -f $PROF ] && echo --calibration $PROF ) > /tmp/x.json 2>>$LOG
  rc=$?
  python3 -c "import json,sys; d=json.load(open('/tmp/x.json')); d['sweep_name']='$name'; print(json.dumps(d))" >> $OUT/sweep.jsonl 2>>$LOG || echo "{\"sweep_name\": \"$name\", \"rc\": $rc}" >> $OUT/sweep.jsonl
  echo "$name rc=$rc at $(( $(date +%s)-T0 )) s"
done < ${SWEEP:-benchmarks/device/sweep.txt}
echo done at $(( $(date +%s)-T0 )) s
