"""Write a one-GPU executor scenario from a sweep line: name L H heads ffn seq mb gb recompute [k=v,...]."""
import sys

import yaml

name, L, H, NH, F, S, MB, GB, RC, *extra = sys.argv[1:]
cl, dtype = sys.argv[-2], sys.argv[-1]
extra = extra[:-2]
model = {"name": name, "num_layers": int(L), "hidden": int(H), "num_heads": int(NH), "ffn_hidden": int(F),
         "vocab_size": 50304, "max_seq_len": int(S)}
for kv in (extra[0].split(",") if extra else []):
    k, v = kv.split("=")
    model[k] = yaml.safe_load(v)
sc = {"model": model, "cluster": cl, "gpus": 1, "layout": {"tp": 1, "pp": 1, "dp": 1},
      "training": {"seq_len": int(S), "global_batch": int(GB), "micro_batch": int(MB), "dtype": dtype,
                   "recompute": RC, "framework": "torch"}}
print(yaml.safe_dump(sc, sort_keys=False))
