#!/usr/bin/env python3
"""Megatron-LM's process groups for one layout, from their documented definition, as JSON.

An independent check of lattice/layout.h (test_layout_5d runs it): Megatron's
parallel_state.initialize_model_parallel builds two RankGenerators over the order
"tp-cp-ep-dp-pp", the decoder's with ep = 1 and the experts' with tp = expert tensor size,
cp = 1, ep = expert model size, dp = world / (etp * ep * pp). For an order of axes (fastest
first) a rank is sum(coordinate[i] * stride[i]), stride[i] = the product of the sizes before i
(generate_masked_orthogonal_rank_groups' docstring, equation (1)). A group of token "a-b" holds
the ranks that share every coordinate except a and b; groups are numbered by the shared
coordinates as one mixed-radix number with the fastest axis least significant (equation (2)),
and ranks within a group likewise by their own coordinates.

Written from that definition, not from Megatron's code: every rank's coordinates are computed,
ranks are bucketed by their shared coordinates, and buckets and members are sorted by the
mixed-radix keys.

usage: megatron_groups.py WORLD TP CP PP EP ETP   (ETP 0: as TP)
prints {"dense": {token: groups}, "expert": {token: groups}, "embedding": groups}; without
arguments, reads one "WORLD TP CP PP EP ETP" per line and prints one such object per line.
"""
import json
import sys

ORDER = ["tp", "cp", "ep", "dp", "pp"]


def coordinates(rank, sizes):
    """The rank's coordinate on each axis of ORDER (sizes: axis -> size)."""
    coords = {}
    for axis in ORDER:
        coords[axis] = rank % sizes[axis]
        rank //= sizes[axis]
    return coords


def mixed_radix_key(coords, axes):
    """The coordinates on `axes` as one number, the first axis (fastest) least significant;
    as a sort key, the slowest axis first."""
    return tuple(coords[a] for a in reversed(axes))


def groups(sizes, token):
    world = 1
    for axis in ORDER:
        world *= sizes[axis]
    members = [a for a in ORDER if a in token.split("-")]
    shared = [a for a in ORDER if a not in members]
    buckets = {}
    for rank in range(world):
        c = coordinates(rank, sizes)
        buckets.setdefault(mixed_radix_key(c, shared), []).append(
            (mixed_radix_key(c, members), rank))
    out = []
    for key in sorted(buckets):
        out.append([rank for _, rank in sorted(buckets[key])])
    return out


def layout_groups(world, tp, cp, pp, ep, etp):
    etp = etp or tp
    if world % (tp * cp * pp) or world % (etp * ep * pp):
        sys.exit("world %d does not divide into the layout's grids" % world)
    dense = {"tp": tp, "cp": cp, "ep": 1, "dp": world // (tp * cp * pp), "pp": pp}
    expert = {"tp": etp, "cp": 1, "ep": ep, "dp": world // (etp * ep * pp), "pp": pp}
    pipeline = groups(dense, "pp")
    return {
        "dense": {t: groups(dense, t) for t in ["tp", "cp", "dp", "dp-cp", "tp-cp", "tp-pp", "pp"]},
        "expert": {t: groups(expert, t) for t in ["ep", "tp", "dp", "tp-ep", "pp"]},
        # Megatron's default_embedding_ranks: the first and last rank of each pipeline group.
        "embedding": [[g[0], g[-1]] if len(g) > 1 else [g[0]] for g in pipeline],
    }


def main():
    if len(sys.argv) > 1:
        print(json.dumps(layout_groups(*(int(a) for a in sys.argv[1:7]))))
        return
    for line in sys.stdin:  # one layout per line, one JSON object per line back
        if line.strip():
            print(json.dumps(layout_groups(*(int(a) for a in line.split()))))


if __name__ == "__main__":
    main()
