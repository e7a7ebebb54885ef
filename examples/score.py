#!/usr/bin/env python3
"""Score bids with a Tidemark checkpoint from Python, through the C ABI.

    cargo build --release -p tidemark-cabi
    echo '{"app":"app1","country":"us","clk_1h":3}' | python3 examples/score.py \
        --lib target/release/libtidemark_cabi.so --checkpoint checkpoints/

Reads one JSON object of bid features per line on stdin and prints one JSON
line of predictions per bid, as `tidemark score` does. A bidder keeps one
scorer open, calls score() per bid, and reload() when a newer checkpoint has
been shipped (every thread keeps scoring meanwhile). The declarations follow
crates/tidemark-cabi/include/tidemark.h; only the standard library is used.
"""

import argparse
import ctypes
import json
import sys


class Scorer:
    def __init__(self, lib_path, checkpoint):
        lib = ctypes.CDLL(lib_path)
        lib.tidemark_open.restype = ctypes.c_void_p
        lib.tidemark_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.tidemark_reload.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.tidemark_score.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_size_t, ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_size_t,
        ]
        lib.tidemark_score_json.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
            ctypes.c_char_p, ctypes.c_size_t,
        ]
        lib.tidemark_created_at_ms.restype = ctypes.c_int64
        lib.tidemark_created_at_ms.argtypes = [ctypes.c_void_p]
        lib.tidemark_free.argtypes = [ctypes.c_void_p]
        self._lib = lib
        self._err = ctypes.create_string_buffer(512)
        self._out = ctypes.create_string_buffer(4096)
        self._s = lib.tidemark_open(checkpoint.encode(), self._err, len(self._err))
        if not self._s:
            raise RuntimeError(self._err.value.decode())

    def score(self, features, names=("ctr", "cvr_short", "cvr_long", "p_install")):
        """The probabilities of `names` (targets, or p_install) for one bid."""
        arr = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
        out = (ctypes.c_double * len(names))()
        bid = json.dumps(features).encode()
        if self._lib.tidemark_score(self._s, bid, arr, len(names), out, self._err, len(self._err)):
            raise ValueError(self._err.value.decode())
        return dict(zip(names, out))

    def score_json(self, line):
        """One bid's JSON text in, the answer `tidemark score` prints out."""
        n = self._lib.tidemark_score_json(
            self._s, line.encode(), self._out, len(self._out), self._err, len(self._err))
        if n < 0:
            raise ValueError(self._err.value.decode())
        return self._out.value.decode()

    def reload(self):
        if self._lib.tidemark_reload(self._s, self._err, len(self._err)):
            raise RuntimeError(self._err.value.decode())

    def created_at_ms(self):
        return self._lib.tidemark_created_at_ms(self._s)

    def close(self):
        self._lib.tidemark_free(self._s)
        self._s = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="path to libtidemark_cabi.so")
    ap.add_argument("--checkpoint", required=True, help="a checkpoint file or directory")
    args = ap.parse_args()
    scorer = Scorer(args.lib, args.checkpoint)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            print(scorer.score_json(line))
        except ValueError as e:
            print(json.dumps({"error": str(e)}))
    scorer.close()


if __name__ == "__main__":
    main()
