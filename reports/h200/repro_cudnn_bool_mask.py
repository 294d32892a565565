"""torch SDPA's cuDNN backend with a boolean attn_mask: masked keys leak (found by onlinesm).

One query, two keys; key 0 is masked (False = may not attend) and its K and V are large. The
math backend ignores key 0, as it must; the cuDNN backend does not.

    python reports/h200/repro_cudnn_bool_mask.py        # on a CUDA machine (H200, torch 2.11)
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
q = torch.randn(1, 1, 1, 16, device="cuda", dtype=torch.float16)
k = torch.randn(1, 1, 2, 16, device="cuda", dtype=torch.float16)
v = torch.randn(1, 1, 2, 16, device="cuda", dtype=torch.float16)
k[..., 0, :], v[..., 0, :] = 100.0, 1000.0                 # the masked key: must change nothing
mask = torch.tensor([[False, True]], device="cuda")       # True = may attend
for backend in (SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION):
    with sdpa_kernel(backend):
        for m in (mask, torch.zeros(1, 2, device="cuda", dtype=q.dtype).masked_fill(~mask, float("-inf"))):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
            print(f"{backend.name:<16} {str(m.dtype):<14} o[:4] = {o[0, 0, 0, :4].tolist()}")
print("expected (v of the visible key):", v[0, 0, 1, :4].tolist())
