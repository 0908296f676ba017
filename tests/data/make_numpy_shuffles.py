#!/usr/bin/python3
"""Expected outputs of numpy's legacy RandomState, for test_gpt_dataset's numpy cases.

Megatron's GPTDataset shuffles its document and sample indices with
numpy.random.RandomState(seed).shuffle; Lattice re-implements that generator in C++
(engine/src/data/numpy_random.cpp) and test_gpt_dataset checks it against this file's
output, tests/data/numpy_shuffles.json. Regenerate with Debian's numpy (python3-numpy):

    /usr/bin/python3 tests/data/make_numpy_shuffles.py > tests/data/numpy_shuffles.json

Recorded per seed:
  raw_uint32      the first 16 raw MT19937 outputs (randint over [0, 2**32) returns them
                  unchanged), which pins the legacy seeding (mt19937_seed);
  interval_1e12   20 draws of randint(0, 10**12 + 1, dtype=uint64): masked rejection on
                  64-bit draws, the branch RandomState.shuffle takes for n > 2**32 + 1;
  shuffles        RandomState(seed).shuffle(arange(n)) for each n; small permutations in
                  full, large ones as head, tail and a digest of the whole permutation;
  consecutive     shuffles of 10, then 1000, then 70000 elements from ONE RandomState,
                  as Megatron shuffles the document index and then the sample index.
The digest is h = (h * 1000003 + v) mod 2**64 over the values in order, from h = 0,
written as 16 hex digits.
"""
import json
import sys

import numpy as np

SEEDS = [0, 1234, 2**31 + 5]
SIZES = [10, 1000, 70000]  # 70000 > 65536: the rejection mask grows past 16 bits
FULL_UP_TO = 1000
EDGE = 32


def digest(values):
    h = 0
    for v in values:
        h = (h * 1000003 + int(v)) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def describe(perm):
    perm = [int(v) for v in perm]
    out = {"n": len(perm), "digest": digest(perm)}
    if len(perm) <= FULL_UP_TO:
        out["permutation"] = perm
    else:
        out["head"] = perm[:EDGE]
        out["tail"] = perm[-EDGE:]
    return out


def main():
    cases = []
    for seed in SEEDS:
        raw = np.random.RandomState(seed).randint(0, 2**32, size=16, dtype=np.uint64)
        interval = np.random.RandomState(seed).randint(0, 10**12 + 1, size=20, dtype=np.uint64)
        shuffles = []
        for n in SIZES:
            x = np.arange(n, dtype=np.int64)
            np.random.RandomState(seed).shuffle(x)
            shuffles.append(describe(x))
        rs = np.random.RandomState(seed)
        consecutive = []
        for n in SIZES:
            x = np.arange(n, dtype=np.int64)
            rs.shuffle(x)
            consecutive.append(describe(x))
        cases.append({
            "seed": seed,
            "raw_uint32": [int(v) for v in raw],
            # strings: JSON readers hold numbers as doubles, exact only below 2**53
            "interval_1e12": [str(int(v)) for v in interval],
            "shuffles": shuffles,
            "consecutive": consecutive,
        })
    json.dump({"generator": "tests/data/make_numpy_shuffles.py",
               "numpy_version": np.__version__, "cases": cases},
              sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
