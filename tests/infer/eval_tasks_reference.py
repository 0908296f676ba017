#!/usr/bin/python3
"""Independent reference for test_eval_tasks: multiple-choice questions whose answers are known
from a float64 PyTorch forward of the same weights, a GPT-2 (tests/train/gpt2_reference.py) or a
LLaVA-style vision-language model from its Hugging Face files (tests/checkpoint/llava_reference.py).

usage: eval_tasks_reference.py make WEIGHTS.safetensors HEADS VOCAB TASK.jsonl EXPECTED.json
  Draws questions over the NullTokenizer (text = space-separated ids), scores every choice
  (sum of log p(choice token | context, earlier tokens)), keeps questions whose best choice
  wins by a clear margin under both rules, and labels them so that acc and acc_norm differ:
  some labels are the best summed choice, some the best per character, some neither.
       eval_tasks_reference.py make-vlm MODEL_DIR VOCAB FOLDER
  The same with images: FOLDER/task.jsonl's questions carry one or two noise PNGs each (in
  FOLDER/img, of several sizes, so padding to a square and resizing are exercised) at `<image>`
  markers of their contexts, preprocessed as LLaVA-1.5 prepares images (expand2square with the
  mean colour, bicubic resize, preprocessor_config.json's mean and std) and spliced in at the
  image token's rows. FOLDER/task_blank.jsonl is the same questions with every image replaced by
  img/blank.png, a square of the mean colour (about zero once normalised); two questions are
  chosen whose best choice the blank images change, so blank's acc is lower. Writes
  FOLDER/expected.json and FOLDER/expected_blank.json.
       eval_tasks_reference.py check EXPECTED.json OUTPUT.json [INDEX]
  Compares `lattice eval --output`'s task INDEX (0) with the expected scores; prints what
  differs.
"""
import json
import os
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "train"))
sys.path.insert(0, os.path.join(here, "..", "checkpoint"))
import gpt2_reference  # noqa: E402
import llava_reference  # noqa: E402

MARGIN = 0.01  # a best choice must win by this much (nats, or nats per character)


def loglikelihoods(params, heads, context, choices):
    ctx = [int(t) for t in context.split(" ")]
    out = []
    for choice in choices:
        whole = [int(t) for t in (context + choice).split(" ")]
        tokens = torch.tensor([whole[:-1]], dtype=torch.long)
        logp = torch.log_softmax(gpt2_reference.forward(params, tokens, heads)[0], dim=-1)
        out.append(sum(logp[k - 1, whole[k]].item() for k in range(len(ctx), len(whole))))
    return out


def best(values):
    order = sorted(range(len(values)), key=lambda i: -values[i])
    return order[0], values[order[0]] - values[order[1]]


def choose_label(ll, choices, wanted, blank=None):
    """(kind, label) for a question whose choices score `ll` (and `blank` with blank images), or
    None when a best choice wins by less than MARGIN or no wanted kind fits. Kinds (what the
    label agrees with): acc (the best sum), norm (the best per character), neither, both;
    acc_flip: acc, where the blank images change the best sum (and not the best per character).
    With `blank`, every other kind has the same best choices under blank images."""
    norm = [v / len(c) for v, c in zip(ll, choices)]
    b, margin = best(ll)
    bn, margin_n = best(norm)
    if margin < MARGIN or margin_n < MARGIN:
        return None
    if blank is not None:
        bb, margin_b = best(blank)
        bbn, margin_bn = best([v / len(c) for v, c in zip(blank, choices)])
        if margin_b < MARGIN or margin_bn < MARGIN or bbn != bn:
            return None
        if bb != b:
            return ("acc_flip", b) if b != bn and wanted.get("acc_flip") else None
    others = [i for i in range(len(choices)) if i not in (b, bn)]
    if b != bn and wanted["acc"]:
        return "acc", b
    if b != bn and wanted["norm"]:
        return "norm", bn
    if b != bn and others and wanted["neither"]:
        return "neither", others[0]
    if b == bn and wanted["both"]:
        return "both", b
    return None


def expected_scores(questions, key):
    """The expected output of `lattice eval --output` for the questions' log-likelihoods `key`."""
    right = [best(q[key])[0] == q["label"] for q in questions]
    right_norm = [best([v / len(c) for v, c in zip(q[key], q["choices"])])[0] == q["label"]
                  for q in questions]
    n = len(questions)
    return {"questions": n, "acc": sum(right) / n, "acc_norm": sum(right_norm) / n,
            "loglikelihoods": [q[key] for q in questions]}


def draw_choices(rng, vocab):
    choices = []
    for _ in range(rng.randrange(2, 5)):
        n = rng.randrange(1, 5)
        # Ids of one to three digits: choices differ in characters as well as tokens.
        choices.append("".join(" " + str(rng.choice([rng.randrange(10), rng.randrange(vocab)]))
                               for _ in range(n)))
    return choices


def make(weights, heads, vocab, task_path, expected_path):
    params = gpt2_reference.read_safetensors(weights)
    rng = random.Random(7)
    # acc 6/10, acc_norm 4/10: the two rules disagree on 8 questions.
    wanted = {"acc": 4, "norm": 2, "neither": 2, "both": 2}
    questions = []
    while any(wanted.values()):
        context = " ".join(str(rng.randrange(vocab)) for _ in range(rng.randrange(2, 9)))
        choices = draw_choices(rng, vocab)
        if len(set(choices)) < len(choices):
            continue
        ll = loglikelihoods(params, heads, context, choices)
        chosen = choose_label(ll, choices, wanted)
        if chosen is None:
            continue
        wanted[chosen[0]] -= 1
        questions.append({"context": context, "choices": choices, "label": chosen[1], "ll": ll})
    rng.shuffle(questions)
    with open(task_path, "w") as f:
        for q in questions:
            f.write(json.dumps({"context": q["context"], "choices": q["choices"],
                                "label": q["label"]}) + "\n")
    expected = expected_scores(questions, "ll")
    with open(expected_path, "w") as f:
        json.dump(expected, f)
    print(f"{len(questions)} questions: acc {expected['acc']}, acc_norm {expected['acc_norm']}")


def preprocess(pixels, size, mean, std):
    """LLaVA-1.5's image (3, size, size) float64 of pixels (H, W, 3) uint8: expand2square with
    the colour int(255 mean), bicubic resize (antialiased, as PIL), rounded to 8 bits, then
    (x / 255 - mean) / std per channel."""
    h, w, _ = pixels.shape
    side = max(h, w)
    square = np.empty((side, side, 3), dtype=np.uint8)
    square[:, :] = [int(255 * m) for m in mean]
    top, left = (side - h) // 2, (side - w) // 2
    square[top:top + h, left:left + w] = pixels
    x = torch.tensor(square, dtype=torch.float64).permute(2, 0, 1).unsqueeze(0)
    if side != size:
        x = F.interpolate(x, size=(size, size), mode="bicubic", align_corners=False,
                          antialias=True)
        x = torch.floor(x + 0.5).clamp(0, 255)
    m = torch.tensor(mean, dtype=torch.float64).view(3, 1, 1)
    s = torch.tensor(std, dtype=torch.float64).view(3, 1, 1)
    return (x[0] / 255 - m) / s


class VlmScorer:
    def __init__(self, model_dir):
        self.config, self.params = llava_reference.load(model_dir)
        pre = json.load(open(os.path.join(model_dir, "preprocessor_config.json")))
        self.mean, self.std = pre["image_mean"], pre["image_std"]
        vc = self.config["vision_config"]
        self.size = vc["image_size"]
        self.Np = (vc["image_size"] // vc["patch_size"]) ** 2
        self.image_token = self.config["image_token_index"]

    def loglikelihoods(self, segments, images, choices):
        """segments: the context's id lists between its images (len(images) + 1 of them)."""
        ctx = list(segments[0])
        for seg in segments[1:]:
            ctx += [self.image_token] * self.Np + seg
        x = torch.stack([preprocess(p, self.size, self.mean, self.std) for p in images])
        features = llava_reference.image_features(self.params, self.config, x)
        features = features.reshape(1, -1, features.shape[-1])  # the prompt's rows, in order
        out = []
        for choice in choices:
            whole = ctx + [int(t) for t in choice.split(" ")[1:]]
            tokens = torch.tensor([whole[:-1]])
            rows = llava_reference.embed(self.params, self.config, tokens, features)
            logp = torch.log_softmax(llava_reference.logits_of(self.params, self.config, rows)[0],
                                     dim=-1)
            out.append(sum(logp[k - 1, whole[k]].item() for k in range(len(ctx), len(whole))))
        return out


def make_vlm(model_dir, vocab, folder):
    scorer = VlmScorer(model_dir)
    rng = random.Random(11)
    noise = np.random.default_rng(11)
    blank = np.full((scorer.size, scorer.size, 3), [int(255 * m) for m in scorer.mean], np.uint8)
    # Real images: acc 6/10, acc_norm 4/10; blank images: the two acc_flip questions lost.
    wanted = {"acc_flip": 2, "acc": 2, "norm": 2, "neither": 2, "both": 2}
    questions = []
    while any(wanted.values()):
        n_images = rng.choice([1, 2])
        # Text before the first image may be empty; after an image it is not (the NullTokenizer
        # reads " 6" after a marker as an empty id and then 6).
        segments = [[rng.randrange(vocab) for _ in range(rng.randrange(0, 3))]]
        segments += [[rng.randrange(vocab) for _ in range(rng.randrange(1, 5))]
                     for _ in range(n_images)]
        context = "<image>".join(" ".join(map(str, seg)) for seg in segments)
        choices = draw_choices(rng, vocab)
        if len(set(choices)) < len(choices):
            continue
        shapes = [rng.choice([(16, 16), (12, 20), (22, 9)]) for _ in range(n_images)]
        images = [noise.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for h, w in shapes]
        ll = scorer.loglikelihoods(segments, images, choices)
        ll_blank = scorer.loglikelihoods(segments, [blank] * n_images, choices)
        chosen = choose_label(ll, choices, wanted, ll_blank)
        if chosen is None:
            continue
        wanted[chosen[0]] -= 1
        questions.append({"context": context, "choices": choices, "label": chosen[1],
                          "images": images, "ll": ll, "ll_blank": ll_blank})
    rng.shuffle(questions)
    os.makedirs(os.path.join(folder, "img"), exist_ok=True)
    Image.fromarray(blank, "RGB").save(os.path.join(folder, "img", "blank.png"))
    with open(os.path.join(folder, "task.jsonl"), "w") as real, \
            open(os.path.join(folder, "task_blank.jsonl"), "w") as blanked:
        for i, q in enumerate(questions):
            names = []
            for k, pixels in enumerate(q["images"]):
                names.append(f"img/q{i}_{k}.png")
                Image.fromarray(pixels, "RGB").save(os.path.join(folder, names[-1]))
            line = {"context": q["context"], "images": names, "choices": q["choices"],
                    "label": q["label"]}
            real.write(json.dumps(line) + "\n")
            line["images"] = ["img/blank.png"] * len(names)
            blanked.write(json.dumps(line) + "\n")
    for key, name in (("ll", "expected.json"), ("ll_blank", "expected_blank.json")):
        expected = expected_scores(questions, key)
        with open(os.path.join(folder, name), "w") as f:
            json.dump(expected, f)
        print(f"{name}: {len(questions)} questions, acc {expected['acc']}, "
              f"acc_norm {expected['acc_norm']}")
    change = max(max(abs(a - b) for a, b in zip(q["ll"], q["ll_blank"])) for q in questions)
    print(f"the blank images change a log-likelihood by up to {change:.4f}")


def check(expected_path, output_path, index=0):
    with open(expected_path) as f:
        want = json.load(f)
    with open(output_path) as f:
        got = json.load(f)["tasks"][index]
    problems = []
    worst = 0.0
    for key in ("questions", "acc", "acc_norm"):
        if got[key] != want[key]:
            problems.append(f"{key}: lattice {got[key]}, expected {want[key]}")
    for q, (g, w) in enumerate(zip(got["loglikelihoods"], want["loglikelihoods"])):
        for c, (gv, wv) in enumerate(zip(g, w)):
            worst = max(worst, abs(gv - wv))
            if abs(gv - wv) > 1e-3:
                problems.append(f"question {q} choice {c}: log-likelihood {gv}, float64 {wv} "
                                "(tolerance 1e-3)")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"acc {got['acc']} and acc_norm {got['acc_norm']} as expected; "
          f"{sum(map(len, want['loglikelihoods']))} log-likelihoods within 1e-3 of float64 "
          f"(largest difference {worst:.2e})")


if __name__ == "__main__":
    # Tensors of a few dozen elements: more threads only contend (10x slower on a loaded machine).
    torch.set_num_threads(1)
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
    elif sys.argv[1] == "make-vlm":
        make_vlm(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        check(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0)
