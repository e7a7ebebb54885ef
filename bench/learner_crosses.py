#!/usr/bin/env python3
"""Tidemark vs Vowpal Wabbit --ftrl given the same 8 feature crosses (the true
pairwise interactions of learner_peers.py's synthetic data), one progressive
pass each, on the file learner_peers.py generated. Prints rows/s and logloss
(all rows, last 10%).  Usage: learner_crosses.py DATA TIDEMARK_BIN WORKDIR"""
import subprocess
import sys
import time

import numpy as np

PAIRS = [(0, 5), (1, 8), (2, 9), (3, 4), (6, 10), (7, 11), (4, 17), (18, 19)]
data, tidemark, work = sys.argv[1], sys.argv[2], sys.argv[3]
vw_text = f"{work}/{data.rsplit('/', 1)[-1]}.1000000.vw"  # written by learner_peers.py run
y = np.loadtxt(data, usecols=0, dtype=np.int8)


def ll(p, y):
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def report(name, preds, secs):
    p = np.loadtxt(preds)
    n = len(y)
    print(f"{name:<28} rows/s {n / secs:>10.0f}  logloss {ll(p, y):.5f}  last10% {ll(p[n * 9 // 10:], y[n * 9 // 10:]):.5f}")


from vowpalwabbit import Workspace  # noqa: E402

ns = "abcdefghijklmnopqrst"
q = " ".join(f"-q {ns[a]}{ns[b]}" for a, b in PAIRS)
args = (f"-d {vw_text} -b 22 --loss_function logistic --link logistic -p {work}/vw_q8.preds --quiet "
        f"--ftrl --ftrl_alpha 0.1 --ftrl_beta 1.0 --l1 1.0 --l2 1.0 {q}")
t0 = time.time()
vw = Workspace(args)
vw.run_parser()
vw.finish()
report("vw_ftrl + 8 crosses", f"{work}/vw_q8.preds", time.time() - t0)

cross = [a for p in PAIRS for a in ("--cross", f"{p[0] + 1},{p[1] + 1}")]
t0 = time.time()
subprocess.run([tidemark, "learn", "--input", data, "--predictions", f"{work}/tm_q8.preds", "--json", *cross],
               check=True, stdout=subprocess.DEVNULL)
report("tidemark + 8 crosses", f"{work}/tm_q8.preds", time.time() - t0)
