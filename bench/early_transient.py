#!/usr/bin/env python3
"""The transient after a shift, for weights of the DEFER family, simulated.

One logit learned by plain SGD (step `lr`) on a stream of members, 50 per
minute: each a provisional 0 at 10 minutes (the short window's end), then a
late 1 10 to 30 minutes after its bid (delay exponential, mean 6 minutes
past the provisional, cut at the long window) with probability q, else a
final 0 at 30. q steps from 5% to 15% at minute 100. Rows weigh
`(1 - p)(1 - c)` (provisional), 1 (late) and `c` (final): unbiased in a
stationary stream for every c in [0, 1] (docs/learner.md derives c = 0,
what Tidemark uses). Prints Σp / Σq over windows of minutes around the
shift, per step and c. Quoted in docs/benchmarks/early.md.

Usage: python3 bench/early_transient.py
"""
import heapq
import math
import random


def run(c, lr, seed=1, qs=(0.05, 0.15), minutes=200, shift=100, short=10, long=30):
    rnd = random.Random(seed)
    rows = []
    for i in range(minutes * 50):
        t = i / 50
        q = qs[1] if t >= shift else qs[0]
        heapq.heappush(rows, (t + short, "provisional", 0))
        if rnd.random() < q:
            delay = min(rnd.expovariate(1 / 6.0), long - short - 1e-6)
            heapq.heappush(rows, (t + short + delay, "late", 1))
        else:
            heapq.heappush(rows, (t + long, "final", 0))
    theta, at_minute, minute = math.log(qs[0] / (1 - qs[0])), {}, 0
    while rows:
        t, kind, y = heapq.heappop(rows)
        while minute <= t:
            at_minute[minute] = 1 / (1 + math.exp(-theta))
            minute += 1
        p = 1 / (1 + math.exp(-theta))
        w = {"provisional": (1 - p) * (1 - c), "late": 1.0, "final": c}[kind]
        theta -= lr * w * (p - y)
    return at_minute, qs, shift


def calibration(at_minute, qs, shift, a, b):
    p = sum(at_minute[t] for t in range(a, b))
    q = sum(qs[1] if t >= shift else qs[0] for t in range(a, b))
    return p / q


def main():
    windows = [(60, 100), (100, 110), (110, 120), (120, 130), (130, 150)]
    print("lr    c     " + "  ".join(f"{a - 100:>+4}..{b - 100:<+4}" for a, b in windows))
    for lr in (0.05, 0.2):
        for c in (0.0, 0.35, 0.6, 1.0):
            at, qs, shift = run(c, lr)
            cells = "  ".join(f"{calibration(at, qs, shift, a, b):>10.3f}" for a, b in windows)
            print(f"{lr:<5} {c:<5} {cells}")


if __name__ == "__main__":
    main()
