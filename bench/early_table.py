"""Tables of issue 48's as-of-bid figures from demo reports (bench/early_seeds.sh).

Usage: python3 bench/early_table.py DIR   (DIR holds <market>-seed<N>.json)
"""
import glob
import json
import sys

ARMS = ["final_only", "pooled_final", "naive", "early", "oracle", "constant"]
TARGETS = ["ctr", "cvr_short", "cvr_long", "p_install"]


def fmt(x, spec=".5f"):
    return "" if x is None else format(x, spec)


def main(root):
    runs = sorted(glob.glob(f"{root}/*-seed*.json"))
    print("| run | target | " + " | ".join(ARMS) + " | gap | cal | sp | z vs final_only |")
    print("|---" * (len(ARMS) + 6) + "|")
    for f in runs:
        name = f.split("/")[-1][:-5]
        v = json.load(open(f))
        for t in TARGETS:
            a = v["targets"][t]["as_of_bid"]
            e = a["early"]
            vs = a["early_vs"]["final_only"]
            z = vs["diff"] / vs["se"] if vs and vs["se"] else None
            print(f"| {name} | {t} | " + " | ".join(fmt(a[k]["kl"]) for k in ARMS)
                  + f" | {fmt(e['gap_closed'], '.3f')} | {fmt(e['calibration'], '.3f')}"
                  + f" | {fmt(e['spearman'], '.3f')} | {fmt(z, '.1f')} |")
    print()
    print("| run | target | " + " | ".join(ARMS) + " | naive→oracle closed | the same, cvr_long's part | slices to oracle (early / final_only) | calibration after (early) | after recovery (early) |")
    print("|---" * (len(ARMS) + 7) + "|")
    for f in runs:
        name = f.split("/")[-1][:-5]
        s = json.load(open(f)).get("shift")
        if not s:
            continue
        for t in ["cvr_long", "p_install"]:
            x = s[t]
            n, e, o = (x[k]["kl_after"] for k in ("naive", "early", "oracle"))
            closed = (n - e) / (n - o) if n != o else None
            # p_install with ctr and cvr_short from the oracle, cvr_long
            # from the arm (asof.rs, cvr_long_only): the share of naive's
            # gap that early's cvr_long closes.
            long_only = None
            if t == "p_install" and x["naive"].get("kl_after_cvr_long_only") is not None:
                nl, el = (x[k]["kl_after_cvr_long_only"] for k in ("naive", "early"))
                long_only = (nl - el) / (nl - o) if nl != o else None
            print(f"| {name} | {t} | " + " | ".join(fmt(x[k]["kl_after"]) for k in ARMS)
                  + f" | {fmt(closed, '.3f')} | {fmt(long_only, '.3f')}"
                  + f" | {x['early']['slices_to_oracle']} / {x['final_only']['slices_to_oracle']}"
                  + f" | {fmt(x['early'].get('calibration_after'), '.3f')} | {fmt(x['early'].get('calibration_after_recovery'), '.3f')} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/early-seeds")
