"""torch SDPA's cuDNN backend with a boolean attn_mask (found by onlinesm; H200, torch 2.11).

1. A query that may attend to no key: the math backend gives zeros; cuDNN attends to every key
   (the output of the unmasked softmax), as if the mask were a finite offset that cancels.
2. A masked key whose score is large leaks into the output: the mask is not -inf.
With the same mask as an additive 0/-inf tensor in the query dtype, cuDNN agrees with math.

    python reports/h200/repro_cudnn_bool_mask.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
dt = torch.bfloat16
q, k, v = (torch.randn(1, 1, 2, 128, device="cuda", dtype=dt) for _ in range(3))
k[..., 0, :] = k[..., 0, :].sign() * q[..., 1, :].sign() * 1e4  # key 0: a huge score for query 1
mask = torch.tensor([[[[False, False], [False, True]]]], device="cuda")  # query 0 sees no key
additive = torch.zeros(mask.shape, device="cuda", dtype=dt).masked_fill(~mask, float("-inf"))
for name, m in (("bool", mask), ("additive", additive)):
    for backend in (SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION):
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        print(f"{name:<9} {backend.name:<16} query 0 (no key): {o[0, 0, 0, :3].tolist()}   "
              f"query 1 (key 1 only): {o[0, 0, 1, :3].tolist()}")
print("expected: query 0 zeros (math's convention); query 1 =", v[0, 0, 1, :3].tolist())
