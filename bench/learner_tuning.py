#!/usr/bin/env python3
"""Tidemark's self-tuning learner against Vowpal Wabbit --ftrl on one TSV file
(issue 25, item 4): one progressive pass each, logloss computed here from
each learner's predictions, wall time around each run (VW's includes parsing
its text file, Tidemark's its TSV).

Runs: Tidemark at its defaults (the grid of 8 settings side by side: 7
learning rates and the label rate alone), Tidemark with one setting (the
grid's centre), the online constant (the running label rate, computed here),
VW at its own defaults (`--ftrl` alone), VW at SPEC 8's settings, VW at each
learning rate of the same grid (its best is picked after the fact), and VW
given the setting Tidemark's grid chose (unless that is the label rate).

Usage: learner_tuning.py DATA TIDEMARK_BIN WORKDIR [--header] [tidemark flags...]
The flags (e.g. --bits 20 --alpha 0.15 --cross a,b --transform n=log1p) go to
every Tidemark run; --bits, --alpha, --beta, --l1, --l2 also set VW's. With
--header the first line names the columns and `name:num` marks numeric ones
(as `tidemark export` writes them): VW gets those as numbers too.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

data, tidemark, work = sys.argv[1], sys.argv[2], sys.argv[3]
flags = sys.argv[4:]
header = "--header" in flags
os.makedirs(work, exist_ok=True)


def flag(name, default):
    return float(flags[flags.index(name) + 1]) if name in flags else default


bits = int(flag("--bits", 22))
# VW gets the same features: crossed columns in namespaces of their own
# (crossed with -q), `log1p` transforms applied in its text file.
crosses = [flags[i + 1].split(",") for i, f in enumerate(flags) if f == "--cross"]
log1p = set()
for i, f in enumerate(flags):
    if f == "--transform":
        name, t = flags[i + 1].split("=", 1)
        if t != "log1p":
            sys.exit(f"learner_tuning.py: only log1p transforms are mirrored for VW, not {t}")
        log1p.add(name)
crossed = sorted({c for pair in crosses for c in pair})
space = {c: "ghijklmnopqrstuvwxyz"[k] for k, c in enumerate(crossed)}
quadratic = " ".join(f"-q {space[a]}{space[b]}" for a, b in crosses)
base = dict(alpha=flag("--alpha", 0.1), beta=flag("--beta", 1.0), l1=flag("--l1", 1.0), l2=flag("--l2", 1.0))
GRID_ALPHA, GRID_L2 = [0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0], [1.0]

# Labels, and VW's text file.
stem = os.path.join(work, os.path.basename(data))
vw_text = stem + ".vw"
labels = []
with open(data, encoding="utf-8") as f:
    names = f.readline().rstrip("\n").split("\t")[1:] if header else None
    out = open(vw_text + ".tmp", "w", encoding="utf-8")
    numeric = [n.endswith(":num") for n in names] if names else []
    plain = [n.removesuffix(":num") for n in names] if names else []
    if crosses and not names:
        sys.exit("learner_tuning.py: --cross needs --header (columns by name)")
    for line in f:
        if not line.strip():
            continue
        cells = line.rstrip("\n").split("\t")
        y = cells[0] == "1"
        labels.append(y)
        spaces = {}
        for j, v in enumerate(cells[1:]):
            if v == "":
                continue
            name = plain[j] if j < len(plain) else str(j)
            if j < len(numeric) and numeric[j]:
                x = float(v)
                if name in log1p:
                    x = float(np.sign(x) * np.log1p(abs(x)))
                feat = f"c{j}:{x!r}"
            else:
                feat = f"c{j}=" + v.replace(" ", "_").replace(":", ";").replace("|", "/")
            spaces.setdefault(space.get(name, "f"), []).append(feat)
        out.write(("1" if y else "-1") + "".join(f" |{k} " + " ".join(v) for k, v in spaces.items()) + "\n")
    out.close()
    os.replace(vw_text + ".tmp", vw_text)
y = np.array(labels, dtype=np.int8)
n = len(y)


def ll(p):
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


rows = []


def report(name, preds, secs, note=""):
    p = np.loadtxt(preds, usecols=0, ndmin=1)
    assert len(p) == n, f"{name}: {len(p)} predictions for {n} rows"
    r = dict(name=name, rows_per_s=n / secs, logloss=ll(p), last10=ll_tail(p), note=note)
    rows.append(r)
    print(f"{name:<44} rows/s {r['rows_per_s']:>10.0f}  logloss {r['logloss']:.5f}  last10% {r['last10']:.5f}  {note}",
          flush=True)
    return r


def ll_tail(p):
    k = n * 9 // 10
    q = np.clip(p[k:], 1e-15, 1 - 1e-15)
    t = y[k:]
    return float(-np.mean(t * np.log(q) + (1 - t) * np.log(1 - q)))


def slug(name):
    return "".join(c if c.isalnum() else "_" for c in name)


def run_tidemark(name, extra):
    preds = f"{stem}.{slug(name)}.preds"
    t0 = time.time()
    out = subprocess.run([tidemark, "learn", "--input", data, "--predictions", preds, "--json", *flags, *extra],
                         check=True, capture_output=True, text=True).stdout
    secs = time.time() - t0
    j = json.loads(out)
    c = j["chosen"]
    what = "the label rate alone" if c["l1"] >= 1e30 else f"alpha {c['alpha']:g} l2 {c['l2']:g}"
    return report(name, preds, secs, f"chose {what}, {j['switches']} switches"), c


from vowpalwabbit import Workspace  # noqa: E402


def run_vw(name, ftrl):
    preds = f"{stem}.{slug(name)}.preds"
    t0 = time.time()
    vw = Workspace(f"-d {vw_text} -b {bits} --loss_function logistic --link logistic -p {preds} --quiet "
                   f"{quadratic} {ftrl}")
    vw.run_parser()
    vw.finish()
    return report(name, preds, time.time() - t0)


def ftrl(alpha, beta, l1, l2):
    return f"--ftrl --ftrl_alpha {alpha:g} --ftrl_beta {beta:g} --l1 {l1:g} --l2 {l2:g}"


print(f"{data}: {n} rows, label rate {y.mean():.5f}, bits {bits}, base {base}")
tm, chosen = run_tidemark("tidemark (defaults: grid of 8)", [])
run_tidemark("tidemark (one setting)", ["--tune-alpha", "1", "--tune-l2", "1"])
constant = stem + ".constant.preds"
ones = np.concatenate([[0.0], np.cumsum(y)[:-1]])
np.savetxt(constant, (ones + 0.5) / (np.arange(n) + 1.0))
online = report("online constant (running label rate)", constant, float("inf"))
vw_default = run_vw("vw --ftrl (its defaults)", "--ftrl")
run_vw("vw --ftrl (SPEC 8 settings)", ftrl(**base))
grid = []
for a in GRID_ALPHA:
    for l in GRID_L2:
        s = dict(base, alpha=base["alpha"] * a, l2=base["l2"] * l)
        grid.append(run_vw(f"vw --ftrl alpha {s['alpha']:g} l2 {s['l2']:g}", ftrl(**s)))
best = min(grid, key=lambda r: r["logloss"])
# VW has no label rate to start from: given the rate alone, it is compared
# with the online constant instead.
winner = online if chosen["l1"] >= 1e30 else run_vw(
    "vw --ftrl given tidemark's choice", ftrl(**dict(base, alpha=chosen["alpha"], l2=chosen["l2"])))
vw_rate = np.mean([r["rows_per_s"] for r in grid])
print(f"tidemark defaults vs VW's best of the grid ({best['name']}): "
      f"{100 * (tm['logloss'] / best['logloss'] - 1):+.3f}% logloss; "
      f"vs VW at its defaults: {100 * (tm['logloss'] / vw_default['logloss'] - 1):+.3f}%; "
      f"vs {winner['name']}: {100 * (tm['logloss'] / winner['logloss'] - 1):+.3f}%; "
      f"vs the online constant: {100 * (tm['logloss'] / online['logloss'] - 1):+.3f}%; "
      f"speed {tm['rows_per_s'] / vw_rate:.2f}x VW's mean over the grid")
