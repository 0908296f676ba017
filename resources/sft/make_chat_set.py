#!/usr/bin/env python3
"""Writes the demo chat set for supervised fine-tuning (docs/data.md, "SFT data"):
chat_train.jsonl and chat_heldout.jsonl beside this script, deterministic (seeded).

The tasks are ones a tiny model can learn from a few hundred examples, with short answers in
a fixed form, so a fine-tune visibly lowers the held-out assistant loss:
  - "Repeat after me: X"           -> "X"
  - "What comes after seven?"      -> "Eight."
  - "What is the opposite of hot?" -> "Cold."
  - "Say X twice."                 -> "X X"
Both input forms appear: {"messages": [...]} (some with a system message, some two tasks in
one conversation) and {"prompt", "response"}. Held-out conversations are drawn from the same
tasks; their repeat / twice phrases are never seen in training (copying must generalise),
while number successors and opposites come from the same small tables (lookups to memorise).

usage: python3 resources/sft/make_chat_set.py [--out-dir DIR]
"""
import argparse
import json
import os
import random

NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
           "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
           "eighteen", "nineteen", "twenty"]
OPPOSITES = [("hot", "cold"), ("big", "small"), ("up", "down"), ("day", "night"), ("old", "new"),
             ("fast", "slow"), ("happy", "sad"), ("light", "dark"), ("open", "closed"),
             ("early", "late"), ("left", "right"), ("hard", "soft"), ("full", "empty"),
             ("rich", "poor"), ("wet", "dry"), ("high", "low"), ("near", "far"),
             ("loud", "quiet"), ("strong", "weak"), ("true", "false"), ("in", "out"),
             ("first", "last"), ("long", "short"), ("good", "bad")]
NOUNS = ["cat", "dog", "fish", "bird", "tree", "house", "river", "stone", "book", "cup", "door",
         "star", "moon", "road", "ship", "apple", "chair", "lamp", "cloud", "horse", "garden",
         "letter", "window", "mountain", "candle", "bridge", "forest", "island", "clock", "bell"]
ADJECTIVES = ["red", "blue", "green", "small", "large", "quiet", "bright", "old", "young",
              "happy", "cold", "warm", "gentle", "brave", "silver", "golden", "tired", "wild"]
VERBS = ["sleeps", "sings", "waits", "shines", "falls", "runs", "grows", "turns", "rests",
         "glows", "moves", "listens"]
SYSTEMS = ["You are a helpful assistant.", "Answer briefly.", "You are a careful assistant."]


def phrase(rng):
    return f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} {rng.choice(VERBS)}"


def task(rng, held_out):
    """One (prompt, answer) pair; held-out phrases are disjoint from training ones."""
    kind = rng.randrange(4)
    if kind == 0:
        while True:
            p = phrase(rng)
            if (hash_bucket(p) == 0) == held_out:
                return f"Repeat after me: {p}", p
    if kind == 1:
        n = rng.randrange(0, 20)
        return f"What comes after {NUMBERS[n]}?", NUMBERS[n + 1].capitalize() + "."
    if kind == 2:
        a, b = rng.choice(OPPOSITES)
        if rng.random() < 0.5:
            a, b = b, a
        return f"What is the opposite of {a}?", b.capitalize() + "."
    while True:
        w = f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
        if (hash_bucket(w) == 0) == held_out:
            return f"Say {w} twice.", f"{w} {w}"


def hash_bucket(text):
    """A stable 1-in-5 split of phrases (Python's hash() is salted per process)."""
    return sum(text.encode()) % 5


def conversation(rng, held_out):
    shape = rng.random()
    if shape < 0.2:
        prompt, answer = task(rng, held_out)
        return {"prompt": prompt, "response": answer}
    messages = []
    if shape < 0.45:
        messages.append({"role": "system", "content": rng.choice(SYSTEMS)})
    for _ in range(2 if shape > 0.8 else 1):
        prompt, answer = task(rng, held_out)
        messages.append({"role": "user", "content": prompt})
        messages.append({"role": "assistant", "content": answer})
    return {"messages": messages}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--train", type=int, default=600)
    parser.add_argument("--heldout", type=int, default=120)
    args = parser.parse_args()
    rng = random.Random(1234)
    for name, count, held_out in (("chat_train.jsonl", args.train, False),
                                  ("chat_heldout.jsonl", args.heldout, True)):
        with open(os.path.join(args.out_dir, name), "w", encoding="utf-8") as f:
            for _ in range(count):
                f.write(json.dumps(conversation(rng, held_out)) + "\n")


if __name__ == "__main__":
    main()
