#!/usr/bin/env python3
"""Lattice's and PyTorch's GPU training figures side by side (tests/gpu/run.sh, run_packed.sh).

Reads the RESULT lines of lattice-bench-train-gpu's and train_torch_gpu.py's output (either file
may be missing) and prints tokens/s, TFLOP/s and MFU of both and Lattice / PyTorch per model.
Usage: side_by_side.py lattice.log torch.log
"""
import json, sys
def results(path):
    try:
        return {r["model"]: r for r in (json.loads(l[7:]) for l in open(path) if l.startswith("RESULT "))}
    except OSError:
        return {}
ours, torch = results(sys.argv[1]), results(sys.argv[2])
if not ours and not torch:
    sys.exit(0)
print()
print("| model | Lattice tokens/s | TFLOP/s | MFU | PyTorch tokens/s | TFLOP/s | MFU | Lattice / PyTorch |")
print("|---|---|---|---|---|---|---|---|")
for m in ["124m", "355m", "1.3b"]:
    a, b = ours.get(m), torch.get(m)
    cell = lambda r, k, f: (f % (r[k] * (100 if k == "mfu" else 1))) if r else "-"
    ratio = "%.2f" % (a["tokens_per_s"] / b["tokens_per_s"]) if a and b else "-"
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
        m, cell(a, "tokens_per_s", "%.0f"), cell(a, "tflops", "%.1f"), cell(a, "mfu", "%.1f %%"),
        cell(b, "tokens_per_s", "%.0f"), cell(b, "tflops", "%.1f"), cell(b, "mfu", "%.1f %%"), ratio))
