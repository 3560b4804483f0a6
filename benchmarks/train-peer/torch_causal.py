"""PyTorch twin of the shipped model's training step, for `laya train --device cuda` against
PyTorch on the same GPU (scripts/gpu-bench.sh runs both). The network and loss are those of
`crates/laya-train` with `--positions relative_causal` and a factorised word head, as
`cargo run --release -p laya-train --example throughput --features cuda` builds them with
LAYA_POSITIONS=relative_causal LAYA_WORD_CLASSES=K LAYA_OWN_CLASS_WORDS=N LAYA_LAYERS LAYA_FFN
LAYA_D_MODEL LAYA_HEADS:

* d LAYA_D_MODEL (128), LAYA_HEADS heads (2), T 16, L pre-norm blocks (FFN width LAYA_FFN, gelu-tanh); each sample is the
  last R = L(T-1)+1 tokens; block l computes keys and values over its n_l input positions and
  queries, attention and FFN over the last m_l = (L-1-l)(T-1)+1 only; query i sees key j within
  the window of T with a learned bias per (block, head, distance);
* word head factorised over K classes of consecutive words after N words in classes of their
  own: the class cross-entropy against the class sums of the soft target plus the within-class
  cross-entropy (log-sum-exp per class by scatter), and the replace head's cross-entropy;
* AdamW (fused on a GPU), gradient clipping at 1.0.

Synthetic batches like the example's: five shown words per sample, the clicked one weighted 3.

    python benchmarks/train-peer/torch_causal.py V BATCH [cuda|cpu]     (LAYA_TORCH_COMPILE=1: torch.compile)
"""
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

T, ROWS, C = 16, 4098, 8
D = int(os.environ.get("LAYA_D_MODEL", "128"))
H = int(os.environ.get("LAYA_HEADS", "2"))
FFN = int(os.environ.get("LAYA_FFN", "256"))
LAYERS = int(os.environ.get("LAYA_LAYERS", "2"))
K = int(os.environ.get("LAYA_WORD_CLASSES", "512"))
OWN = int(os.environ.get("LAYA_OWN_CLASS_WORDS", "1024"))
R = LAYERS * (T - 1) + 1


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.up, self.down = nn.Linear(D, FFN), nn.Linear(FFN, D)

    def forward(self, x, m, bias_mask):
        b, n, _ = x.shape
        h = self.n1(x)
        k = self.k(h).view(b, n, H, D // H).transpose(1, 2)
        v = self.v(h).view(b, n, H, D // H).transpose(1, 2)
        xq, hq = x[:, n - m:], h[:, n - m:]
        q = self.q(hq).view(b, m, H, D // H).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // H) + bias_mask, dim=-1)
        x1 = xq + self.o((att @ v).transpose(1, 2).reshape(b, m, D))
        return x1 + self.down(F.gelu(self.up(self.n2(x1)), approximate="tanh"))


class Net(nn.Module):
    def __init__(self, vocab, class_of):
        super().__init__()
        self.tok = nn.Embedding(ROWS, D)
        self.pos = nn.Parameter(torch.zeros(LAYERS * H, T))
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D)
        self.word, self.cls, self.rep = nn.Linear(D, vocab), nn.Linear(D, int(class_of.max()) + 1), nn.Linear(D, C)
        self.register_buffer("class_of", class_of)
        # Per block: distance index [m, n] and the causal window's additive mask.
        for l in range(LAYERS):
            m = (LAYERS - 1 - l) * (T - 1) + 1
            n = m + T - 1
            i = torch.arange(m).view(m, 1)
            j = torch.arange(n).view(1, n)
            delta = T - 1 + i - j
            self.register_buffer(f"dist{l}", delta.clamp(0, T - 1))
            self.register_buffer(f"mask{l}", torch.where((delta >= 0) & (delta < T), 0.0, -1e9))

    def hidden(self, rows):
        x = self.tok(rows)
        for l, blk in enumerate(self.blocks):
            m = (LAYERS - 1 - l) * (T - 1) + 1
            dist, mask = getattr(self, f"dist{l}"), getattr(self, f"mask{l}")
            bias = self.pos[l * H:(l + 1) * H][:, dist] + mask  # [H, m, n]
            x = blk(x, m, bias.unsqueeze(0))
        return self.norm(x[:, -1])

    def loss(self, rows, target, target_weight, rep_target, total_weight):
        z = self.hidden(rows)
        b, v = target.shape
        kk = self.cls.out_features
        idx = self.class_of.expand(b, v)
        class_t = torch.zeros(b, kk, device=z.device).scatter_add_(1, idx, target)
        class_ce = -(class_t * F.log_softmax(self.cls(z), -1)).sum()
        x = self.word(z)
        cmax = torch.full((b, kk), -float("inf"), device=z.device).scatter_reduce(1, idx, x, "amax").detach()
        e = torch.exp(x - cmax.gather(1, idx))
        lse = torch.log(torch.zeros(b, kk, device=z.device).scatter_add_(1, idx, e)) + cmax
        within = (target * (lse.gather(1, idx) - x)).sum()
        rep = -(rep_target * F.log_softmax(self.rep(z), -1)).sum()
        return (class_ce + within) / target_weight + rep / total_weight


def main(vocab, batch, device):
    torch.manual_seed(1)
    rest = vocab - OWN
    class_of = torch.tensor([w if w < OWN else OWN + (w - OWN) * K // rest for w in range(vocab)], device=device)
    net = Net(vocab, class_of).to(device)
    fused = device == "cuda"
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01, fused=fused)
    step_loss = torch.compile(net.loss) if os.environ.get("LAYA_TORCH_COMPILE") == "1" else net.loss
    batches = []
    g = torch.Generator().manual_seed(2)
    for _ in range(16):
        rows = torch.randint(2, ROWS, (batch, R), generator=g)
        ids = torch.randint(0, vocab, (batch, 5), generator=g)
        target = torch.zeros(batch, vocab).scatter_(1, ids, torch.tensor([3.0, 1, 1, 1, 1]).expand(batch, 5) / 7.0)
        rep = torch.zeros(batch, C).scatter_(1, torch.randint(0, C, (batch, 1), generator=g), 1.0)
        batches.append((rows.to(device), target.to(device), float(batch), rep.to(device), float(batch)))

    def step(*b):
        loss = step_loss(*b)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0, foreach=True)
        opt.step()
        return loss

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for b in batches[:4]:
        step(*b)
    sync()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < 8.0:
        for b in batches:
            step(*b)
            n += batch
        sync()
    sps = n / (time.perf_counter() - t0)
    mode = "compile" if os.environ.get("LAYA_TORCH_COMPILE") == "1" else "eager"
    print(f"torch {torch.__version__} {mode}  {device}  K {K}+{OWN}  V {vocab:>6}  batch {batch:>3}  {sps:>9.0f} samples/s", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "cuda")
