"""Why the early `cvr_long` over-predicts: one feature's form against the
lag of late rows, in a small FTRL-Proximal simulation (docs/learner.md,
"What is left of the early target's gap").

Members (clicks) arrive for 120 minutes, 60 a minute, with a bias, one of 50
apps and a count x in 0..10 (the true logit is linear in it); about 3%
install, 10 to 30 minutes after the click. With `num` the count is one
coordinate times x, with `cat` a coordinate per value. Arms, all
FTRL-Proximal (alpha 0.0375, beta 1, l2 1) from a base margin:

  oracle  every final label at its bid;
  final   every final label at the long window's end (30 min);
  prompt  provisional 0 (weight 1 - p) and late 1 both at the short
          window's end (10 min): early feedback if no install came late;
  early   provisional 0 at 10 min, late 1 when the install comes (as built).

Each minute from 40 on, its members are scored with the model of its start:
calibration (sum of predictions over sum of true probabilities) and mean KL
from the truth, averaged over the seeds.

    python3 bench/early_lag.py [num|cat] [lp|fixed] [SEEDS]

`lp` (default): the early arms' margin is the weighted rate L/P, as built;
`fixed`: the population's true mean rate, never drifting. SEEDS: how many
(default 8).
"""
import math
import random
import sys

FORM = sys.argv[1] if len(sys.argv) > 1 else "num"
MARGIN = sys.argv[2] if len(sys.argv) > 2 else "lp"
SEEDS = int(sys.argv[3]) if len(sys.argv) > 3 else 8
ALPHA, BETA, L2 = 0.0375, 1.0, 1.0
APPS, PER_MINUTE, MINUTES, SCORED_FROM = 50, 60, 120, 40
SHORT, LONG = 10, 30
ARMS = ["oracle", "final", "prompt", "early"]


def sigmoid(z):
    return 1 / (1 + math.exp(-z))


class Ftrl:
    """FTRL-Proximal without L1, as tidemark-ftrl learns one setting."""

    def __init__(self):
        self.z, self.n, self.margin = {}, {}, 0.0

    def weight(self, i):
        return -self.z.get(i, 0.0) / ((BETA + math.sqrt(self.n.get(i, 0.0))) / ALPHA + L2)

    def predict(self, x):
        return sigmoid(self.margin + sum(self.weight(i) * v for i, v in x))

    def update(self, x, g):
        for i, v in x:
            gi, n, w = g * v, self.n.get(i, 0.0), self.weight(i)
            sigma = (math.sqrt(n + gi * gi) - math.sqrt(n)) / ALPHA
            self.z[i] = self.z.get(i, 0.0) + gi - sigma * w
            self.n[i] = n + gi * gi


def market(seed):
    rng = random.Random(seed)
    effect = [rng.gauss(0, 0.7) for _ in range(APPS)]
    members = []
    for _ in range(PER_MINUTE * MINUTES):
        t, app, x = rng.uniform(0, MINUTES), rng.randrange(APPS), rng.randrange(11)
        count = [(1000, float(x))] if FORM == "num" else [(2000 + x, 1.0)]
        q = sigmoid(math.log(0.03 / 0.97) + effect[app] + 0.04 * (x - 5))
        y = rng.random() < q
        delay = rng.uniform(SHORT, LONG) if y else None
        members.append((t, [(0, 1.0), (1 + app, 1.0)] + count, q, y, delay))
    return members


def rows_of(arm, members):
    """(minute read, member, kind, label), in reading order; sweeps each minute."""
    rows = []
    for k, (t, _, _, y, delay) in enumerate(members):
        if arm == "oracle":
            rows.append((t, k, "final", y))
        elif arm == "final":
            rows.append((math.ceil(t + LONG), k, "final", y))
        else:
            start = math.ceil(t + SHORT)
            rows.append((start, k, "provisional", False))
            if y:
                rows.append((start if arm == "prompt" else math.ceil(t + delay), k, "late", True))
    return sorted(rows, key=lambda r: r[0])


def run(arm, members):
    f, rows = Ftrl(), rows_of(arm, members)
    mean_q = sum(m[2] for m in members) / len(members)
    provisional = late = ones = zeros = 0
    at, sum_p, sum_q, kl, scored = 0, 0.0, 0.0, 0.0, 0
    events = sorted(members, key=lambda m: m[0])
    e = 0
    for minute in range(MINUTES):
        while at < len(rows) and rows[at][0] <= minute:
            _, k, kind, label = rows[at]
            at += 1
            x = members[k][1]
            p = f.predict(x)
            if kind == "final":
                g, ones, zeros = p - label, ones + label, zeros + (1 - label)
            elif kind == "provisional":
                g, provisional = (1 - p) * p, provisional + 1
            else:
                g, late = p - 1, late + 1
            f.update(x, g)
            if arm in ("oracle", "final"):
                f.margin = math.log((ones + 0.5) / (zeros + 0.5))
            elif MARGIN == "fixed":
                f.margin = math.log(mean_q / (1 - mean_q))
            else:
                r = (late + 0.5) / (provisional + 1)
                f.margin = math.log(r / (1 - r))
        while e < len(events) and events[e][0] < minute + 1:
            _, x, q, _, _ = events[e]
            e += 1
            if minute >= SCORED_FROM:
                p = f.predict(x)
                sum_p, sum_q, scored = sum_p + p, sum_q + q, scored + 1
                kl += q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))
    return sum_p / sum_q, kl / scored


totals = {arm: [0.0, 0.0] for arm in ARMS}
for seed in range(1, SEEDS + 1):
    members = market(seed)
    for arm in ARMS:
        c, k = run(arm, members)
        totals[arm][0] += c / SEEDS
        totals[arm][1] += k / SEEDS
print(f"count as {FORM}, early margin {MARGIN}, {SEEDS} seeds")
for arm in ARMS:
    print(f"  {arm:7s} calibration {totals[arm][0]:.3f}  KL {totals[arm][1]:.5f}")
