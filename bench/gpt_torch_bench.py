"""The small GPT of train/gpt.h in PyTorch eager on CPU, for the throughput comparison in
docs/TRAINING.md ("Speed"). Same architecture and sizes as bench/train_bench.cc's step
(layers 2, width 64, heads 4, vocab 256, batch 8 x 64 tokens, float32, AdamW, clipping
at 1.0, one thread): prints the median step time of 7 steps after one warm-up step, and
the median thread CPU time of each phase (forward; backward with zero_grad; optimizer:
clipping and AdamW), as bench/train_bench.cc prints spmdkit's.
Run: python3 bench/gpt_torch_bench.py   (needs torch; not part of the test suite)."""
import math
import statistics
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(0)
L, D, H, V, S, B = 2, 64, 4, 256, 64, 8


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(D)
        self.q = torch.nn.Linear(D, D)
        self.k = torch.nn.Linear(D, D)
        self.v = torch.nn.Linear(D, D)
        self.out = torch.nn.Linear(D, D)
        self.ln2 = torch.nn.LayerNorm(D)
        self.up = torch.nn.Linear(D, 4 * D)
        self.down = torch.nn.Linear(4 * D, D)

    def forward(self, x, mask):
        h = self.ln1(x)
        def heads(t):
            return t.view(B, S, H, D // H).transpose(1, 2)
        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(D // H)) + mask
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, D)
        x = x + self.out(ctx)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Gpt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(V, D)
        self.positions = torch.nn.Parameter(torch.randn(S, D) * 0.02)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(L)])
        self.final_ln = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, V, bias=False)

    def forward(self, tokens, labels):
        mask = torch.triu(torch.full((S, S), -1e9), diagonal=1)
        x = self.embedding(tokens) + self.positions
        for block in self.blocks:
            x = block(x, mask)
        logits = self.head(self.final_ln(x))
        return F.cross_entropy(logits.view(-1, V), labels.view(-1))


model = Gpt()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.01)
tokens = torch.randint(0, V, (B, S))
labels = torch.randint(0, V, (B, S))
times, cpu, forward, backward, optimizer = [], [], [], [], []
for step in range(8):
    start, start_cpu = time.perf_counter(), time.thread_time()
    loss = model(tokens, labels)
    t1 = time.thread_time()
    opt.zero_grad()
    loss.backward()
    t2 = time.thread_time()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    t3 = time.thread_time()
    times.append(time.perf_counter() - start)
    cpu.append(t3 - start_cpu)
    forward.append(t1 - start_cpu)
    backward.append(t2 - t1)
    optimizer.append(t3 - t2)
step = statistics.median(times[1:])
print(f"torch {torch.__version__} eager GPT step (layers {L}, width {D}, heads {H}, vocab {V}, "
      f"batch {B} x {S} tokens, float32, 1 thread): {step * 1e3:.1f} ms, {B * S / step:.0f} tokens/s, "
      f"CPU {statistics.median(cpu[1:]) * 1e3:.1f} ms (median of 7)")
print(f"torch step by phase, CPU ms (median of 7): forward {statistics.median(forward[1:]) * 1e3:.2f}, "
      f"backward {statistics.median(backward[1:]) * 1e3:.2f}, optimizer {statistics.median(optimizer[1:]) * 1e3:.2f}")
