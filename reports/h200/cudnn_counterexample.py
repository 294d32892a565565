"""Re-run a saved SDPA counterexample on the math and cuDNN backends and show its mask.

    python reports/h200/cudnn_counterexample.py .onlinesm/failures/attention-*.json
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from onlinesm.counterexample import decode_array
from onlinesm.dtypes import to_torch

for path in sys.argv[1:]:
    rec = json.load(open(path))
    inp = {k: decode_array(v) for k, v in rec["inputs"].items()}
    q, k, v = (to_torch(inp[n], "cuda") for n in ("q", "k", "v"))
    mask = None if inp.get("mask") is None else torch.as_tensor(inp["mask"], device="cuda")
    print(path, rec["property"], "q", list(q.shape), "k", list(k.shape), q.dtype,
          "mask", None if mask is None else list(mask.shape), "causal", inp.get("causal"))
    outs = {}
    for backend in (SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION):
        with sdpa_kernel(backend):
            outs[backend.name] = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).float()
    diff = (outs["MATH"] - outs["CUDNN_ATTENTION"]).abs()
    print("  max |math - cudnn| =", diff.max().item(), "at", [int(i) for i in torch.nonzero(diff == diff.max())[0]])
