#!/usr/bin/env python3
"""`just bench-early-vw`: Vowpal Wabbit --ftrl on an early target's rows,
with the weights Tidemark's learner applied, against Tidemark itself.

Input: a TSV written by `tidemark export --target T --kinds all` (label,
`:kind`, `:txid`, then one column per feature, `name:num` for numeric ones), the
weights `tidemark learn --input ... --weights FILE` wrote (one per row), and
its progressive predictions (`--predictions FILE`). VW learns the same rows
with the same weights (as importance weights) and the same settings, every
column categorical as `name=value` (Tidemark's numeric columns are hashed as
their value; VW gets the same `name:value`); both are scored by progressive
logloss on the matured rows (`late` and `final`), as `learn` reports.

Tidemark starts every score from its base margin, the log-odds of the rate
the rows so far give (docs/learner.md: `ln((ones + ½)/(zeros + ½))`, and
for an early target the rate at which the weighted rows' steps cancel),
where VW learns a bias weight from zero. VW's label format takes a
per-row `base` (a margin added to its score), so the same model can be
given to VW: `--base` (the default) hands it the margin computed here from
the document's formula, row by row; `--no-base` leaves VW as it is.

Prints one JSON object: rows, the two loglosses, their difference, and each
learner's rows per second.
"""

import argparse
import json
import math
import os
import sys
import time


def logloss(p, y):
    p = min(max(p, 1e-15), 1 - 1e-15)
    return -math.log(p if y else 1 - p)


def weighted_rate(p, late, f1, f0):
    """docs/learner.md: the rate q in [0, 1] solving
    P(1 - q)q + L(q - 1) + F0 q + F1 (q - 1) = 0, with 1/2 added to F0, F1."""
    f0, f1 = f0 + 0.5, f1 + 0.5
    b = p + late + f0 + f1
    c = late + f1
    disc = max(b * b - 4.0 * p * c, 0.0)
    return min(max(2.0 * c / (b + math.sqrt(disc)), 1e-9), 1 - 1e-9)


class Margin:
    """The base margin of the next row, as docs/learner.md defines it."""

    def __init__(self):
        self.rows = self.ones = self.prov = self.late = 0

    def value(self):
        if self.prov == 0:
            return math.log((self.ones + 0.5) / (self.rows - self.ones + 0.5))
        q = weighted_rate(self.prov, self.late, self.ones, self.rows - self.ones)
        return math.log(q / (1 - q))

    def learned(self, kind, y):
        if kind == "final" and y and self.prov:
            self.prov = self.late = 0  # its shard emits final labels only now
        if kind == "provisional":
            self.prov += 1
        elif kind == "late":
            self.late += 1
        elif not self.prov:
            self.rows += 1
            self.ones += int(y)


def main():
    a = argparse.ArgumentParser()
    a.add_argument("tsv")
    a.add_argument("weights")
    a.add_argument("predictions")
    a.add_argument("--work", required=True)
    a.add_argument("--bits", type=int, default=20)
    a.add_argument("--alpha", type=float, default=0.1)
    a.add_argument("--beta", type=float, default=1.0)
    a.add_argument("--l1", type=float, default=1.0)
    a.add_argument("--l2", type=float, default=1.0)
    a.add_argument("--tidemark-seconds", type=float, default=0.0)
    a.add_argument("--base", action=argparse.BooleanOptionalAction, default=True)
    args = a.parse_args()
    os.makedirs(args.work, exist_ok=True)
    vw_in = os.path.join(args.work, "early.vw")
    vw_preds = os.path.join(args.work, "early.vw.preds")
    labels, matured = [], []
    with open(args.tsv) as f, open(args.weights) as w, open(vw_in, "w") as out:
        header = f.readline().rstrip("\n").split("\t")
        assert header[1] == ":kind", "export with --kinds all"
        names = header[2:]
        margin = Margin()
        for line, weight in zip(f, w):
            cells = line.rstrip("\n").split("\t")
            y = cells[0] == "1"
            labels.append(y)
            matured.append(cells[1] != "provisional")
            feats = []
            for n, v in zip(names, cells[2:]):
                if v == "" or n.startswith(":"):
                    continue
                if n.endswith(":num"):
                    feats.append(f"{n[:-4]}:{v}")
                else:
                    feats.append(f"{n}={v}".replace(" ", "_").replace("|", "_").replace(":", "_"))
            base = f" {margin.value():.9g}" if args.base else ""
            margin.learned(cells[1], y)
            out.write(f"{1 if y else -1} {float(weight)}{base} |f {' '.join(feats)}\n")
    from vowpalwabbit import Workspace
    cmd = (f"--ftrl --ftrl_alpha {args.alpha} --ftrl_beta {args.beta} --l1 {args.l1} "
           f"--l2 {args.l2} -b {args.bits} --loss_function logistic --link logistic --quiet "
           f"-d {vw_in} -p {vw_preds}")
    started = time.time()
    ws = Workspace(cmd)
    ws.run_parser()
    ws.finish()
    vw_seconds = time.time() - started
    vw_p = [float(l.split()[0]) for l in open(vw_preds)]
    tm_p = [float(l) for l in open(args.predictions)]
    assert len(vw_p) == len(tm_p) == len(labels), (len(vw_p), len(tm_p), len(labels))
    rows = [i for i, m in enumerate(matured) if m]
    vw_ll = sum(logloss(vw_p[i], labels[i]) for i in rows) / max(len(rows), 1)
    tm_ll = sum(logloss(tm_p[i], labels[i]) for i in rows) / max(len(rows), 1)
    json.dump({
        "rows": len(labels), "matured": len(rows), "vw_base_margin": args.base,
        "tidemark_logloss": tm_ll, "vw_logloss": vw_ll, "difference": tm_ll - vw_ll,
        "vw_rows_per_second": len(labels) / max(vw_seconds, 1e-9),
        "tidemark_rows_per_second": len(labels) / args.tidemark_seconds if args.tidemark_seconds else None,
    }, sys.stdout)
    print()


if __name__ == "__main__":
    main()
