#!/usr/bin/env python3
"""The eager PyTorch peer of rdattn's model (docs/benchmarks.md, "rdattn against eager PyTorch").

The same model as model/gpt.cc, written the way a PyTorch user writes it (nanoGPT's style: plain
modules, ops composed in Python, autograd does the backward), run by Debian's python3-torch, which
is the same LibTorch 1.13 build (libtorch_cpu.so.1.13) and the same OpenBLAS as rdattn's:

  - arms: standard (pre-norm residual), block (Block AttnRes: one depth read feeds Q, K and V),
    rd (RD-AttnRes: Q, K from the QK read, V from its own learned read over the same keys), tied,
    frozen_v, average and average_asym, with the source topology of MODEL.md section 2.3;
  - the depth reads in MODEL.md's factorised form (logits inv_rms_k · (x_k · (g ⊙ q)), each
    source's inverse RMS computed once per forward, the mixture a sum over the raw sources), as
    rdattn computes them, so that the comparison is of implementations, not of algorithms;
  - RMSNorm pre-norms, RoPE (rotate-half), causal softmax attention (q·kᵀ, mask, softmax, ·v),
    SwiGLU MLP, the LM head tied to the embedding, mean cross-entropy;
  - rdattn's initialisation, draw for draw: one CPU generator seeded with the init seed, N(0, 0.02)
    in float32 for the embedding, then per layer W_Q, W_K, W_V, W_O, W_gate, W_up, W_down (W_O and
    W_down with 0.02 / sqrt(2L)); gains 1, pseudo-queries 0; average_asym's second query from its
    own generator (SplitMix64 of the seed). So both sides start from the same weights and, on the
    same batch (the same generator draw as rdattn_model_bench's RandomBatch), their losses agree
    to float32 rounding;
  - the full training step: zero_grad(set_to_none=True), forward, loss, backward,
    clip_grad_norm_(1.0), torch.optim.AdamW (weight decay 0.1 on matrices, none on gains and
    pseudo-queries, betas (0.9, 0.95), eps 1e-8, lr 1e-3), as rdattn's trainer does.

Modes:
  --check        builds every arm, prints one JSON line {"arms": {arm: {"params", "init_loss"}}}.
  --serve        for rdattn_model_bench --eager-pytorch: builds every arm, prints
                 "EAGER_PEER_READY {json}" and then answers one command line at a time on stdin:
                   step ARM N   runs N full steps of ARM on the fixed batch, answers
                                "EAGER_PEER_DONE SECONDS LOSS..." (wall time of the N steps,
                                measured here, and each step's loss)
                   quit         exits 0
                 Any error is one line "EAGER_PEER_ERROR message" and exit 1.
"""

import argparse
import ctypes
import json
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

ARMS = ("standard", "block", "rd", "tied", "average", "average_asym", "frozen_v")

# model/config.cc's presets (the fields that shape the model).
PRESETS = {
    "tiny": dict(layers=2, width=64, heads=2, ffn_hidden=192, blocks=2, context=64, vocab_size=257),
    "cpu-small": dict(layers=4, width=128, heads=2, ffn_hidden=384, blocks=2, context=128,
                      vocab_size=257),
    "cpu-bench": dict(layers=4, width=256, heads=4, ffn_hidden=768, blocks=2, context=256,
                      vocab_size=512),
    "S": dict(layers=16, width=576, heads=9, ffn_hidden=2560, blocks=8, context=1024,
              vocab_size=50304),
    "M": dict(layers=24, width=832, heads=13, ffn_hidden=3904, blocks=8, context=1024,
              vocab_size=50304),
}
NORM_EPS = 1e-6
KEY_NORM_EPS = 1e-6
ROPE_THETA = 10000.0
MASK64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def rms_norm(x, gain, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


def rotate_half(x):
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(nn.Module):
    def __init__(self, c, arm):
        super().__init__()
        d, f = c["width"], c["ffn_hidden"]
        for name, shape in (("wq", (d, d)), ("wk", (d, d)), ("wv", (d, d)), ("wo", (d, d)),
                            ("wgate", (f, d)), ("wup", (f, d)), ("wdown", (d, f))):
            setattr(self, name, nn.Parameter(torch.empty(shape)))
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.mlp_norm = nn.Parameter(torch.ones(d))
        if arm != "standard":
            self.q_attn = nn.Parameter(torch.zeros(d))
            self.attn_key_norm = nn.Parameter(torch.ones(d))
            self.q_mlp = nn.Parameter(torch.zeros(d))
            self.mlp_key_norm = nn.Parameter(torch.ones(d))
        if arm == "rd":
            self.q_v = nn.Parameter(torch.zeros(d))
        if arm == "frozen_v":
            self.register_buffer("q_v", torch.zeros(d))  # fixed at zero: not a parameter
        if arm in ("average", "average_asym"):
            self.q_b = nn.Parameter(torch.zeros(d))


class Gpt(nn.Module):
    def __init__(self, c, arm, init_seed):
        super().__init__()
        if arm not in ARMS:
            raise ValueError(f"arm: unknown '{arm}'; valid: {', '.join(ARMS)}")
        self.c, self.arm = c, arm
        d, t = c["width"], c["context"]
        self.heads, self.dh = c["heads"], d // c["heads"]
        self.emb = nn.Parameter(torch.empty(c["vocab_size"], d))
        self.final_norm = nn.Parameter(torch.ones(d))
        if arm != "standard":
            self.q_final = nn.Parameter(torch.zeros(d))
            self.final_key_norm = nn.Parameter(torch.ones(d))
        self.layers = nn.ModuleList(Layer(c, arm) for _ in range(c["layers"]))
        # RoPE tables (float64, then float32, as model/gpt.cc's RopeTables) and the causal mask.
        inv_freq = c["rope_theta"] ** (-torch.arange(0, self.dh, 2, dtype=torch.float64) / self.dh)
        ang = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
        full = torch.cat((ang, ang), -1)
        self.register_buffer("cos", full.cos().float(), persistent=False)
        self.register_buffer("sin", full.sin().float(), persistent=False)
        self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).tril(), persistent=False)
        self.initialize(init_seed)

    @torch.no_grad()
    def initialize(self, seed):
        # model/gpt.cc's GptImpl::Initialize, draw for draw (float32 draws from one generator).
        gen = torch.Generator().manual_seed(seed)
        std, out_std = 0.02, 0.02 / math.sqrt(2.0 * self.c["layers"])

        def draw(p, s, g):
            p.copy_(torch.empty(p.shape, dtype=torch.float32).normal_(0.0, s, generator=g))

        draw(self.emb, std, gen)
        for layer in self.layers:
            for name, s in (("wq", std), ("wk", std), ("wv", std), ("wo", out_std),
                            ("wgate", std), ("wup", std), ("wdown", out_std)):
                draw(getattr(layer, name), s, gen)
        if self.arm == "average_asym":
            asym = torch.Generator().manual_seed(splitmix64(seed ^ 0xA5A5A5A5))
            for layer in self.layers:
                draw(layer.q_b, 0.01, asym)

    def attention(self, layer, x_qk, v):
        b, t, d = x_qk.shape
        h, dh = self.heads, self.dh
        cos, sin = self.cos[:t], self.sin[:t]

        def heads(z):
            return z.view(b, t, h, dh).transpose(1, 2)

        def rope(z):
            return z * cos + rotate_half(z) * sin

        q = rope(heads(F.linear(x_qk, layer.wq)))
        k = rope(heads(F.linear(x_qk, layer.wk)))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(-1)
        y = (att @ heads(v)).transpose(1, 2).reshape(b, t, d)
        return F.linear(y, layer.wo)

    def mlp(self, layer, x):
        return F.linear(F.silu(F.linear(x, layer.wgate)) * F.linear(x, layer.wup), layer.wdown)

    def source(self, x):
        # A source of the depth reads with its inverse RMS, computed once per source and shared
        # by every read that sees it (as rdattn's DepthSources does).
        return x, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c["key_norm_eps"])

    def depth_read(self, sources, queries, key_gain):
        # MODEL.md section 2.1, factorised form: per route r and source k,
        # z[k, r] = q_r · RMSNorm_g(x_k) = inv_rms_k · (x_k · (g ⊙ q_r)), alpha = softmax_k z,
        # h_r = sum_k alpha[k, r] x_k over the raw sources; the routes share the keys.
        gq = torch.stack(queries, 1) * key_gain.unsqueeze(1)               # [D, R]
        alpha = torch.stack([(x @ gq) * inv for x, inv in sources]).softmax(0)  # [K, B, T, R]
        outs = []
        for r in range(len(queries)):
            h = alpha[0, ..., r:r + 1] * sources[0][0]
            for k in range(1, len(sources)):
                h = h + alpha[k, ..., r:r + 1] * sources[k][0]
            outs.append(h)
        return outs

    def forward(self, tokens):
        e = F.embedding(tokens, self.emb)
        if self.arm == "standard":
            x = e
            for layer in self.layers:
                hh = rms_norm(x, layer.attn_norm, self.c["norm_eps"])
                x = x + self.attention(layer, hh, F.linear(hh, layer.wv))
                x = x + self.mlp(layer, rms_norm(x, layer.mlp_norm, self.c["norm_eps"]))
            return F.linear(rms_norm(x, self.final_norm, self.c["norm_eps"]), self.emb)

        per_block = self.c["layers"] // self.c["blocks"]
        # The completed blocks b_0 = e, b_1, ... and the current partial sum, each with its
        # inverse RMS (self.source).
        blocks, partial, p_src = [], e, self.source(e)
        for i, layer in enumerate(self.layers):
            srcs = blocks + [p_src]
            if self.arm == "block":
                (h0,) = self.depth_read(srcs, [layer.q_attn], layer.attn_key_norm)
                x_qk = rms_norm(h0, layer.attn_norm, self.c["norm_eps"])
                v = F.linear(x_qk, layer.wv)
            elif self.arm in ("rd", "tied", "frozen_v"):
                qv = layer.q_attn if self.arm == "tied" else layer.q_v
                h0, h1 = self.depth_read(srcs, [layer.q_attn, qv], layer.attn_key_norm)
                x_qk = rms_norm(h0, layer.attn_norm, self.c["norm_eps"])
                v = F.linear(rms_norm(h1, layer.attn_norm, self.c["norm_eps"]), layer.wv)
            else:  # average, average_asym
                h0, h1 = self.depth_read(srcs, [layer.q_attn, layer.q_b], layer.attn_key_norm)
                x_qk = rms_norm(0.5 * (h0 + h1), layer.attn_norm, self.c["norm_eps"])
                v = F.linear(x_qk, layer.wv)
            if i % per_block == 0:  # block boundary: the partial becomes a completed block
                blocks.append(p_src)
                partial = None
            a = self.attention(layer, x_qk, v)
            partial = a if partial is None else partial + a
            p_src = self.source(partial)
            (hm,) = self.depth_read(blocks + [p_src], [layer.q_mlp], layer.mlp_key_norm)
            partial = partial + self.mlp(layer, rms_norm(hm, layer.mlp_norm, self.c["norm_eps"]))
            p_src = self.source(partial)
        (hf,) = self.depth_read(blocks + [p_src], [self.q_final], self.final_key_norm)
        return F.linear(rms_norm(hf, self.final_norm, self.c["norm_eps"]), self.emb)


def make_adamw(model, lr=1e-3):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def full_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def random_batch(c, batch, seed):
    # rdattn_model_bench's RandomBatch: at::randint(V, {B, T+1}) from a CPU generator seeded
    # with `seed`.
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(c["vocab_size"], (batch, c["context"] + 1), generator=gen,
                         dtype=torch.long)


def blas_core():
    """The core of the OpenBLAS this process loaded (torch loads it privately), or ""."""
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "blas" in line and "/" in line})
    except OSError:
        return ""
    for path in libs:
        try:
            fn = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_char_p
        return fn().decode()
    return ""


def retain_freed_host_memory():
    # worker/trainer/runtime.cc's RetainFreedHostMemory, which rdattn_model_bench calls: the same
    # glibc malloc settings, so that the comparison is of the two implementations, not of malloc.
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    ok = libc.mallopt(m_mmap_threshold, 32 << 20) == 1
    ok &= libc.mallopt(m_trim_threshold, 2**31 - 1) == 1
    ok &= libc.mallopt(m_top_pad, 64 << 20) == 1
    return bool(ok)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="print parameter counts and init loss")
    mode.add_argument("--serve", action="store_true", help="answer rdattn_model_bench's commands")
    p.add_argument("--preset", required=True, help="one of " + ", ".join(PRESETS))
    p.add_argument("--config", default="",
                   help="JSON object of model fields over the preset's (layers, width, heads, "
                        "ffn_hidden, blocks, context, vocab_size, norm_eps, key_norm_eps, "
                        "rope_theta): rdattn_model_bench passes its ModelConfig")
    p.add_argument("--arms", default="standard,block,rd", help="comma-separated arms")
    p.add_argument("--batch", type=int, default=4, help="sequences per step")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--init-seed", type=int, default=0, help="rdattn's init seed")
    p.add_argument("--batch-seed", type=int, default=1, help="seed of the fixed batch")
    p.add_argument("--no-retain-freed-memory", action="store_true",
                   help="leave glibc malloc's defaults (rdattn_model_bench sets them as below)")
    a = p.parse_args(argv)
    if a.preset not in PRESETS:
        p.error(f"--preset: unknown preset '{a.preset}'; valid: {', '.join(PRESETS)}")
    base = dict(PRESETS[a.preset], norm_eps=NORM_EPS, key_norm_eps=KEY_NORM_EPS,
                rope_theta=ROPE_THETA)
    if a.config:
        try:
            over = json.loads(a.config)
        except ValueError as e:
            p.error(f"--config: not JSON: {e}")
        if not isinstance(over, dict):
            p.error("--config: expected a JSON object")
        for key, value in over.items():
            if key not in base:
                p.error(f"--config: unknown field '{key}'; valid: {', '.join(base)}")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                p.error(f"--config: field '{key}' must be a positive number, got {value!r}")
            base[key] = value
    for key in ("layers", "width", "heads", "ffn_hidden", "blocks", "context", "vocab_size"):
        if not isinstance(base[key], int):
            p.error(f"--config: field '{key}' must be an integer, got {base[key]!r}")
    if base["width"] % base["heads"] or (base["width"] // base["heads"]) % 2:
        p.error("--config: width / heads must be an even integer (the RoPE head width)")
    if base["layers"] % base["blocks"]:
        p.error("--config: layers must be divisible by blocks")
    a.config = base
    a.arms = [s for s in a.arms.split(",") if s]
    for arm in a.arms:
        if arm not in ARMS:
            p.error(f"--arms: unknown arm '{arm}'; valid: {', '.join(ARMS)}")
    if not a.arms:
        p.error("--arms: empty list")
    for flag in ("batch", "threads"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag}: must be a positive integer, got {getattr(a, flag)}")
    return a


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    retained = False if a.no_retain_freed_memory else retain_freed_host_memory()
    c = a.config
    batch = random_batch(c, a.batch, a.batch_seed)
    x, y = batch[:, :-1], batch[:, 1:]
    models, opts, arms = {}, {}, {}
    for arm in a.arms:
        m = Gpt(c, arm, a.init_seed)
        with torch.no_grad():
            logits = m(x)
            init_loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1)).item()
        models[arm], opts[arm] = m, make_adamw(m)
        arms[arm] = {"params": sum(p.numel() for p in m.parameters()), "init_loss": init_loss}
    info = {"torch": torch.__version__, "blas_core": blas_core(),
            "threads": torch.get_num_threads(), "retain_freed_memory": retained, "arms": arms}
    if a.check:
        print(json.dumps(info), flush=True)
        return 0
    print("EAGER_PEER_READY " + json.dumps(info), flush=True)
    for line in sys.stdin:
        words = line.split()
        if words == ["quit"]:
            return 0
        if len(words) != 3 or words[0] != "step" or words[1] not in models:
            print(f"EAGER_PEER_ERROR bad command '{line.strip()}' (expected 'step ARM N' with ARM "
                  f"one of {','.join(models)}, or 'quit')", flush=True)
            return 1
        n = int(words[2])
        m, opt = models[words[1]], opts[words[1]]
        t0 = time.perf_counter()
        losses = [full_step(m, opt, x, y) for _ in range(n)]
        dt = time.perf_counter() - t0
        print("EAGER_PEER_DONE %.9f %s" % (dt, " ".join("%.9g" % l.item() for l in losses)),
              flush=True)
    return 0  # stdin closed: the bench has gone


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as e:  # one line for the bench, which shows it
        print(f"EAGER_PEER_ERROR {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
