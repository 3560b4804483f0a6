"""PyTorch twin of the training step that `cargo run --release -p laya-train --example throughput`
times: same network (d 128, 2 heads, 3 pre-norm blocks of FFN 512, T 16, 3,002-row codepoint table,
last block on the last position only, word and replace heads), same batch (128), same loss (soft
cross-entropy over the word head with a click-weighted target of six words, plus the replace-class
cross-entropy), AdamW. Prints samples/s per (vocabulary, threads) in the format of the Rust example.

    python benchmarks/train-peer/torch_train.py            # needs torch (benchmarks/peers/run.sh installs it)
    LAYA_LAYERS=2 LAYA_FFN=256 LAYA_BATCH=512 python benchmarks/train-peer/torch_train.py   # the default model's shape
"""
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

D, H, T, ROWS, C = 128, 2, 16, 3002, 8
# The Rust example's knobs: LAYA_FFN / LAYA_LAYERS (default 512 / 3), LAYA_BATCH (one value here).
FFN = int(os.environ.get("LAYA_FFN", "512"))
LAYERS = int(os.environ.get("LAYA_LAYERS", "3"))
BATCH = int(os.environ.get("LAYA_BATCH", "128"))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.up, self.down = nn.Linear(D, FFN), nn.Linear(FFN, D)

    def forward(self, x, last_only):
        b = x.shape[0]
        h = self.n1(x)
        k = self.k(h).view(b, T, H, D // H).transpose(1, 2)
        v = self.v(h).view(b, T, H, D // H).transpose(1, 2)
        xq, hq = (x[:, -1:], h[:, -1:]) if last_only else (x, h)
        tq = xq.shape[1]
        q = self.q(hq).view(b, tq, H, D // H).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // H), dim=-1)
        x1 = xq + self.o((att @ v).transpose(1, 2).reshape(b, tq, D))
        return x1 + self.down(F.gelu(self.up(self.n2(x1)), approximate="tanh"))


class Net(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tok = nn.Embedding(ROWS, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D)
        self.word, self.rep = nn.Linear(D, vocab), nn.Linear(D, C)

    def forward(self, rows):
        x = self.tok(rows) + self.pos
        for i, blk in enumerate(self.blocks):
            x = blk(x, i + 1 == len(self.blocks))
        z = self.norm(x[:, -1])
        return self.word(z), self.rep(z)


def child(vocab, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    net = Net(vocab)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    batches = []
    for _ in range(24):
        rows = torch.randint(2, ROWS, (BATCH, T))
        target = torch.zeros(BATCH, vocab)
        ids = torch.randint(0, vocab, (BATCH, 6))
        target.scatter_(1, ids, torch.tensor([3.0, 1, 1, 1, 1, 1]).expand(BATCH, 6) / 8.0)
        batches.append((rows, target, torch.randint(0, C, (BATCH,))))

    def step(rows, target, rc):
        w, r = net(rows)
        loss = -(target * F.log_softmax(w, -1)).sum(-1).mean() + F.cross_entropy(r, rc)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()

    for b in batches[:4]:
        step(*b)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < 6.0:
        for b in batches:
            step(*b)
            n += BATCH
    sps = n / (time.perf_counter() - t0)
    print(f"torch {torch.__version__}  V {vocab:>6}  rows {ROWS:>5}  batch {BATCH:>3}  threads {threads:>2}  {sps:>7.0f} samples/s", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        child(int(sys.argv[1]), int(sys.argv[2]))
    else:
        for vocab in (512, 20000):
            for threads in (1, 2):
                os.spawnv(os.P_WAIT, sys.executable, [sys.executable, __file__, str(vocab), str(threads)])
