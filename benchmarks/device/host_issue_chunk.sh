#!/bin/bash
# The device call that timed trainsim execute's eager chunk at 2 and 8 blocks on the H200 (2026-11-26, 30 s):
# raw per-rep seconds -> $OUT/hi.json, kept as benchmarks/data/host_issue_chunk_h200_raw.json and fitted by
# trainsim/kernels/host_issue_bench.py chunk_issue_from_runs into profile_h200.json host_issue_chunk.
# `trainsim calibrate --device cuda` now runs the same measurement (host_issue_bench.bench_chunk_issue).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1; export PYTHONPATH=$PWD:/tmp/site; nproc; timeout 200 python3 - 30 > $OUT/hi.json <<'E'
import torch,json,statistics as S,contextlib,sys,torch.nn.functional as F
from trainsim.kernels.torch_model import build_chunk,ModelOptions
from trainsim.kernels.microbench import eager_block_styles
from trainsim.specs import ModelSpec
d=torch.device('cuda' if torch.cuda.is_available() else 'cpu');R=int(sys.argv[1]);out={}
def tm(fn,setup=None):
 ts=[]
 for i in range(R+5):
  if setup:setup()
  if d.type=='cuda':
   torch.cuda.synchronize();a=torch.cuda.Event(enable_timing=True);b=torch.cuda.Event(enable_timing=True);a.record();fn();b.record();b.synchronize();t=a.elapsed_time(b)/1e3
  else:
   import time;t0=time.perf_counter();fn();t=time.perf_counter()-t0
  if i>=5:ts.append(t)
 return ts
for st,base in eager_block_styles().items():
 for ac in ('bf16','none'):
  for rc in ('none','full'):
   for n in (2,8):
    torch.manual_seed(0);sp=ModelSpec(**dict(base,num_layers=n));c=build_chunk(sp,list(range(n)),True,True,ModelOptions(recompute=rc),seed=0,device=d)
    ids=torch.randint(0,sp.vocab_size,(1,sp.max_seq_len),device=d);opt=torch.optim.Adam(list(c.parameters()),lr=1e-3);s={}
    cx=lambda:torch.autocast(d.type,dtype=torch.bfloat16) if ac=='bf16' else contextlib.nullcontext()
    def fw():
     with cx():s['l']=F.cross_entropy(c(ids).flatten(0,1).float(),ids.flatten())
    def bw():(s.pop('l')/4).backward()
    fw();bw()
    f=tm(fw,lambda:s.pop('l',None));b=tm(bw,fw);o=tm(opt.step)
    out[f'{st}|{ac}|{rc}|{n}']={'tensors':len(list(c.parameters())),'fwd':f,'bwd':b,'step':o}
print(json.dumps({'device':torch.cuda.get_device_name(0) if d.type=='cuda' else 'cpu','torch':torch.__version__,'runs':out}))
E
echo rc=$?; head -c 300 $OUT/hi.json
