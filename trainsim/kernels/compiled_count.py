"""Kernels one block issues under torch.compile, counted from the graphs AOTAutograd hands to Inductor.

``torch.compile`` (Dynamo + AOTAutograd) traces a block's forward and backward into two aten graphs, split by
the same min-cut partitioner Inductor uses (``min_cut_rematerialization_partition``). Inductor then emits:

* one extern call per matrix multiply (``mm``/``addmm``/``bmm``: cuBLAS through ``extern_kernels``, the default
  without max-autotune) and per attention op (SDPA's flash / memory-efficient kernels are aten calls Inductor
  does not generate);
* generated Triton kernels for everything else, fusing chains of pointwise and reduction ops into one kernel
  (PyTorch 2 paper, Ansel et al., ASPLOS 2024, Sec. 5: TorchInductor's scheduler fuses nodes that share data;
  ``torch/_inductor/scheduler.py``). Fusion never crosses an extern call, since the extern kernel's output must
  be materialised first.

So a pass issues ``externs + regions`` kernels, where a region is a connected group of the non-extern compute
nodes (views and tuple unpacking link nodes without costing one). Inductor may split a region further (two
reductions over different axes, as a layer norm's input and weight gradients, run as separate kernels), so
the region count is a lower bound of the kernels a compiled pass launches. ``python -m
trainsim.kernels.compiled_count`` counts every style of cost_models.host_issue again and compares with
cost_models.compiled_issue.COMPILED_BLOCK_KERNELS. Runs on CPU: the graphs are captured, never compiled.
"""

from __future__ import annotations

import operator

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition

from trainsim.cost_models.compiled_issue import COMPILED_BLOCK_KERNELS

from .megatron_block import MegatronLayer
from .op_count import STYLE_ARCH, VIEW_OPS, style_spec
from .torch_model import Block, ModelOptions

EXTERN_OPS = ("mm", "addmm", "bmm", "baddbmm")


def _is_extern(name: str) -> bool:
    return name in EXTERN_OPS or "scaled_dot_product" in name or "flash_attention" in name or \
        "efficient_attention" in name


def _name(node) -> str | None:
    packet = getattr(node.target, "overloadpacket", None)
    return packet.__name__ if packet is not None else None


def graph_kernels(gm: torch.fx.GraphModule) -> int:
    """Extern calls plus fused regions of the other compute nodes of one aten graph (module doc). A node joins
    its producers' region only at the same depth of extern calls: a node that needs an extern kernel's output
    runs after it, so not in a kernel that feeds it."""
    parent: dict = {}
    depth: dict = {}  # extern calls on the longest path to a node

    def find(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    def source(n):  # the node behind views and tuple unpacking
        while n.op == "call_function" and (n.target is operator.getitem or _name(n) in VIEW_OPS):
            n = n.args[0]
        return n

    externs = 0
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is operator.getitem or _name(n) in VIEW_OPS:
            continue
        srcs = [source(a) for a in n.all_input_nodes]
        d = max((depth.get(s, 0) for s in srcs), default=0)
        if _is_extern(_name(n) or ""):
            externs += 1
            depth[n] = d + 1
            continue
        depth[n] = d
        parent[n] = n
        for s in srcs:
            if s in parent and depth[s] == d:
                parent[find(s)] = find(n)
    return externs + len({find(n) for n in parent})


def _capture(make_module, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> tuple[int, int]:
    """(forward, backward) kernels of one compiled forward and backward of ``make_module()`` on CPU."""
    graphs: dict[str, int] = {}

    def keep(kind):
        def compiler(gm, _inputs):
            graphs[kind] = graph_kernels(gm)
            return make_boxed_func(gm.forward)
        return compiler

    backend = aot_autograd(fw_compiler=keep("fwd"), bw_compiler=keep("bwd"),
                           partition_fn=min_cut_rematerialization_partition)
    torch._dynamo.reset()
    module = make_module().to(dtype)
    x = torch.randn(*shape, dtype=dtype, requires_grad=True)
    torch.compile(module, backend=backend, fullgraph=True)(x).sum().backward()
    torch._dynamo.reset()
    return graphs["fwd"], graphs["bwd"]


def counted_compiled_kernels(hidden: int = 256, heads: int = 4,
                             styles: tuple[str, ...] | None = None) -> dict[str, tuple[int, int]]:
    """(forward, backward) kernels of the compiled block of each style of cost_models.host_issue.BLOCK_OPS (or of
    ``styles``)."""
    out = {}
    for style in STYLE_ARCH:
        if styles is None or style in styles:
            spec = style_spec(style, hidden, heads)
            out[style] = _capture(lambda s=spec: Block(s, ModelOptions()), (1, 64, hidden))
    # the eager softmax path casts fp16 scores to fp32 and back (megatron_block), so it is captured in fp16
    for style, fused, dtype in (("megatron-gpt-unfused", True, torch.float32),
                                ("megatron-gpt-unfused-eager-softmax", False, torch.float16)):
        if styles is None or style in styles:
            out[style] = _capture(lambda f=fused: MegatronLayer(hidden, heads, 4 * hidden, fused_softmax=f),
                                  (64, 1, hidden), dtype)
    return out


def main() -> int:
    """Print each style's compiled counts beside COMPILED_BLOCK_KERNELS; exit status 1 where they differ."""
    counted = counted_compiled_kernels()
    for style, c in counted.items():
        table = COMPILED_BLOCK_KERNELS.get(style)
        print(f"{style:<24} fwd {c[0]:>3} bwd {c[1]:>3}  {'same' if table == c else f'differs: {table}'}")
    return 0 if all(COMPILED_BLOCK_KERNELS.get(s) == c for s, c in counted.items()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
