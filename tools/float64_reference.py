"""What every fixture script needs to make transformers' float64 forward really float64, and to prove it.

transformers' `model.double()` still computes in float32 in places: RMSNorm, eager attention's softmax,
the rotary tables (inv_freq is a float32 buffer made at init, and from_pretrained keeps it), and routers.
The replacements below compute in the input's dtype; an architecture's own float32 casts are patched by
its own script. `Float32Counter` then proves that no operator of a reference pass read or wrote a float32
tensor: a script stops if one did.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def rms_norm(self, x):
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def gemma_rms_norm(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


def rotary(self, x, position_ids):
    """A rotary module's forward with its inv_freq as it is (float64 after `rebuild_rotary`)."""
    freqs = position_ids[..., None].to(torch.float64) * self.inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def eager_attention(repeat_kv):
    """transformers' eager_attention_forward with its softmax in the scores' dtype (theirs: float32)."""
    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None, **kwargs):
        key = repeat_kv(key, module.num_key_value_groups)
        value = repeat_kv(value, module.num_key_value_groups)
        weights = torch.matmul(query, key.transpose(2, 3)) * (module.head_dim**-0.5 if scaling is None else scaling)
        if softcap is not None:
            weights = torch.tanh(weights / softcap) * softcap
        if attention_mask is not None:
            weights = weights + attention_mask
        weights = torch.softmax(weights, dim=-1)
        return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights

    return attention


def rebuild_rotary(model) -> None:
    """inv_freq in float64 for a model with one default rotary module (checked against transformers' own)."""
    rotary_module, config = model.model.rotary_emb, model.config
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    theirs = rotary_module.inv_freq
    ours = 1.0 / config.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    assert torch.allclose(ours.float(), theirs.float(), rtol=1e-6, atol=0)
    rotary_module.inv_freq = ours


class Float32Counter(TorchDispatchMode):
    """Counts the operators dispatched, and those whose inputs or outputs hold a float32 tensor."""

    def __init__(self):
        super().__init__()
        self.ops, self.float32 = 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        tensors = [t for t in torch.utils._pytree.tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
        if any(t.dtype in (torch.float32, torch.float16, torch.bfloat16) for t in tensors):
            self.float32.append(str(func))
        return out


def counter_sees_float32() -> bool:
    """The counter itself catches what the patches remove: a softmax cast to float32, as transformers' routers do."""
    with torch.no_grad(), Float32Counter() as counter:
        torch.nn.functional.softmax(torch.ones(1, 3, dtype=torch.float64), dtype=torch.float, dim=-1)
    return bool(counter.float32)


def greedy_passes(model, ids: list[int], steps: int, states=lambda cache: {}) -> tuple[list[dict], Float32Counter]:
    """Prefill, then greedy decoding through transformers' own cache, under the float32 counter: each pass's
    `logits` and `layers` (every decoder layer's output), plus what `states(cache)` reads of the cache after it."""
    import numpy as np
    from transformers import DynamicCache

    captured = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: captured.append(out[0] if isinstance(out, tuple) else out))
             for layer in model.model.layers]
    cache, feed, passes = DynamicCache(config=model.config), ids, []
    counter = Float32Counter()
    with torch.no_grad(), counter:
        for _ in range(steps):
            captured.clear()
            logits = model(torch.tensor([feed]), cache=cache, use_cache=True).logits[0]
            passes.append({"logits": logits.numpy(), "layers": np.stack([h[0].numpy() for h in captured]),
                           **states(cache)})
            feed = [int(torch.argmax(logits[-1]))]
    for hook in hooks:
        hook.remove()
    return passes, counter
