#!/usr/bin/env python3
"""A feature whose values are all recent, under early weights, simulated.

FTRL-Proximal (alpha 0.1, beta 1, L2 1, as Tidemark's) on three features per
member: a bias, an app (20, recurring) and, with `hourly`, the hour of its
bid, which changes every 60 minutes and never recurs (as in a demo whose
150 minutes of event time see each hour once). 30 members a minute, final
rate 6%; provisional zero at 10 minutes, late one uniform between 10 and 30,
else final zero at 30. Rows weigh `(1 - p)(1 - c)` / 1 / `c` (Tidemark: c =
0). Prints the model's mean prediction over its true rate, per window of
minutes: with the hour, each new hour opens with an over-prediction (its
weight starts at zero while the bias still makes up for the last hour's,
which held the zeros of the members in flight). Quoted in docs/learner.md.

Usage: python3 bench/early_young.py
"""
import heapq
import math
import random


class Ftrl:
    def __init__(self, alpha=0.1, beta=1.0, l2=1.0):
        self.z, self.n, self.alpha, self.beta, self.l2 = {}, {}, alpha, beta, l2

    def weight(self, i):
        z, n = self.z.get(i, 0.0), self.n.get(i, 0.0)
        return -z / ((self.beta + math.sqrt(n)) / self.alpha + self.l2)

    def predict(self, x):
        return 1 / (1 + math.exp(-sum(self.weight(i) for i in x)))

    def update(self, x, g):
        for i in x:
            w, n = self.weight(i), self.n.get(i, 0.0)
            n2 = n + g * g
            self.z[i] = self.z.get(i, 0.0) + g - (math.sqrt(n2) - math.sqrt(n)) / self.alpha * w
            self.n[i] = n2


def run(c, hourly, seed=1, q=0.06, minutes=240, per_minute=30, short=10, long=30):
    rnd = random.Random(seed)
    rows = []
    for k in range(minutes * per_minute):
        t = k / per_minute
        x = ("bias", f"hour{int(t // 60) if hourly else 0}", f"app{rnd.randrange(20)}")
        heapq.heappush(rows, (t + short, k, "provisional", 0, x))
        if rnd.random() < q:
            heapq.heappush(rows, (t + short + rnd.uniform(0, long - short), k, "late", 1, x))
        else:
            heapq.heappush(rows, (t + long, k, "final", 0, x))
    m, calibration, minute = Ftrl(), {}, 0
    while rows:
        t, _, kind, y, x = heapq.heappop(rows)
        while minute <= t:
            hour = f"hour{int(minute // 60) if hourly else 0}"
            p = sum(m.predict(("bias", hour, f"app{a}")) for a in range(20)) / 20
            calibration[minute] = p / q
            minute += 1
        p = m.predict(x)
        w = {"provisional": (1 - p) * (1 - c), "late": 1.0, "final": c}[kind]
        m.update(x, w * (p - y))
    return calibration


def main():
    windows = [(40, 60), (60, 75), (75, 90), (90, 120), (120, 135), (135, 180), (180, 195), (195, 240)]
    print("features        c    " + "  ".join(f"{a:>3}-{b:<3}" for a, b in windows))
    for hourly in (False, True):
        for c in (0.0, 0.5):
            cal = run(c, hourly)
            cells = "  ".join(f"{sum(cal[t] for t in range(a, b)) / (b - a):>7.2f}" for a, b in windows)
            print(f"{'bias, app, hour' if hourly else 'bias, app':<15} {c:<4} {cells}")


if __name__ == "__main__":
    main()
