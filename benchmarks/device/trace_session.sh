#!/bin/bash
# Device run 2: profiler traces of host-bound and GEMM-bound one-GPU steps, and Llama-style blocks.
set -u
export PYTHONUNBUFFERED=1
DEV=${DEV:-cuda}; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; LOG=$OUT/log2.txt
if [ -d .whl ] && [ "${NOWHL:-0}" = 0 ]; then python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >>$LOG 2>&1 || exit 3; export PYTHONPATH=$PWD:/tmp/site; else export PYTHONPATH=$PWD; fi
T0=$(date +%s)
GPU=$(python3 -c "import torch;print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')")
case "$GPU" in *H200*) CL=hgx-h200;; *H100*) CL=dgx-h100;; *) CL=cpu-host;; esac
PROF=${PROF:-benchmarks/data/profile_h200.json}
while read -r line; do
  [ -z "$line" ] && continue
  set -- $line; name=$1; tr=$2; shift 2
  python3 benchmarks/device/gen_scenario.py $name "$@" $CL ${DTYPE:-bf16} > /tmp/s_$name.yaml 2>>$LOG || { echo "gen $name failed"; continue; }
  TR=""; [ "$tr" = 1 ] && TR="--profile-trace /tmp/tr_$name"
  timeout ${EX_T:-50} python3 -m trainsim.cli.main execute /tmp/s_$name.yaml --device $DEV --steps ${STEPS:-3} --warmup 2 --json --calibration $PROF $TR > /tmp/x.json 2>>$LOG
  rc=$?
  python3 -c "import json; d=json.load(open('/tmp/x.json')); d['sweep_name']='$name'; d['traced']=$tr; print(json.dumps(d))" >> $OUT/sweep2.jsonl 2>>$LOG || echo "{\"sweep_name\": \"$name\", \"rc\": $rc}" >> $OUT/sweep2.jsonl
  if [ "$tr" = 1 ] && [ -d /tmp/tr_$name ]; then mv /tmp/tr_$name/*.json /tmp/trace_$name.json; fi
  echo "$name rc=$rc at $(( $(date +%s)-T0 )) s"
done < ${SWEEP:-benchmarks/device/trace_sweep.txt}
timeout 60 python3 benchmarks/device/trace_summary.py $OUT/trace_summary.json /tmp/trace_*.json >> $LOG 2>&1; echo "summary rc=$?"
for f in /tmp/trace_*.json; do gzip -c $f > /tmp/t.gz; s=$(stat -c %s /tmp/t.gz); echo "$f gz $s" >> $LOG; done
[ -f /tmp/trace_g1024_mb1.json ] && gzip -c /tmp/trace_g1024_mb1.json > $OUT/trace_g1024_mb1.json.gz
find $OUT -size +15M -delete
echo done at $(( $(date +%s)-T0 )) s
