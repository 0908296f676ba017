#!/usr/bin/env python3
"""Writes gpt2_sample_ids.json: the ids GPT-2's encoder gives for gpt2_sample.txt, as Megatron's
GPT2BPETokenizer computes them (OpenAI's encoder.py on Python's `regex` module), which is what
test_gpt2_bpe checks Lattice's tokenizer against. Written from encoder.py's documented
behaviour, not copied: bytes map to printable characters (bytes_to_unicode), the text splits
with GPT-2's pattern, and each word's adjacent pair of lowest merge rank is merged until none
has a rank. Run once, when the sample text changes (needs Debian's python3-regex and GPT-2's
files from installers/fetch-gpt2-vocab.sh):
  python3 tests/data/make_gpt2_reference.py [GPT2_DIR]
With --print TEXT it prints the ids of TEXT (Python escapes allowed, e.g. 'x \\u0085y') instead.
Python's `regex` \\s is Unicode White_Space (U+0085 included, U+FEFF not), as in Hugging Face's
tokenizers; npm's gpt-3-encoder runs the same pattern in JavaScript, whose \\s differs on exactly
those two characters, so it is not the reference.
"""
import argparse
import hashlib
import json
import os
import sys

import regex

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
EOD = 50256


def default_gpt2_dir():
    data = os.environ.get("LATTICE_DATA_DIR") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "lattice")
    return os.path.join(data, "gpt2")


def byte_to_char():
    """The 256 bytes as printable characters: the printable Latin-1 bytes stand for themselves,
    every other byte, in increasing order, for the next code point from U+0100 on."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


class Gpt2Encoder:
    def __init__(self, gpt2_dir):
        with open(os.path.join(gpt2_dir, "vocab.json"), encoding="utf-8") as f:
            self.ids = json.load(f)
        with open(os.path.join(gpt2_dir, "merges.txt"), encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f]
        pairs = [tuple(line.split(" ")) for line in lines[1:] if line]  # line 1: "#version"
        self.rank = {pair: r for r, pair in enumerate(pairs)}
        self.chars = byte_to_char()
        self.cache = {}

    def merge(self, word):
        """The symbols of `word` after BPE: merge the lowest-ranked adjacent pair, every
        occurrence left to right, until no adjacent pair has a rank."""
        if word in self.cache:
            return self.cache[word]
        symbols = list(word)
        while len(symbols) > 1:
            ranked = [(self.rank[p], p) for p in zip(symbols, symbols[1:]) if p in self.rank]
            if not ranked:
                break
            _, (a, b) = min(ranked)
            merged, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        self.cache[word] = symbols
        return symbols

    def encode(self, text):
        out = []
        for word in PATTERN.findall(text):
            mapped = "".join(self.chars[b] for b in word.encode("utf-8"))
            out.extend(self.ids[s] for s in self.merge(mapped))
        return out

    def decode(self, ids):
        back = {c: b for b, c in self.chars.items()}
        token = {i: t for t, i in self.ids.items()}
        return bytes(back[c] for i in ids for c in token[i]).decode("utf-8")


def write_reference(encoder, here):
    text_path = os.path.join(here, "gpt2_sample.txt")
    raw = open(text_path, "rb").read()
    text = raw.decode("utf-8")  # raises on invalid UTF-8
    ids = encoder.encode(text)
    if encoder.decode(ids) != text:
        sys.exit("the reference encoder does not round-trip gpt2_sample.txt")
    if EOD in ids:
        sys.exit("gpt2_sample.txt encoded to <|endoftext|> (id 50256)")
    rows = ",\n".join("    " + ", ".join(map(str, ids[i:i + 16])) for i in range(0, len(ids), 16))
    out = f"""{{
  "generator": "tests/data/make_gpt2_reference.py",
  "encoder": "OpenAI encoder.py's algorithm on Python regex {regex.__version__} (Megatron's GPT2BPETokenizer)",
  "python": "{sys.version.split()[0]}",
  "text": "gpt2_sample.txt",
  "text_sha256": "{hashlib.sha256(raw).hexdigest()}",
  "ids": [
{rows}
  ]
}}
"""
    with open(os.path.join(here, "gpt2_sample_ids.json"), "w", encoding="utf-8") as f:
        f.write(out)
    print(f"gpt2_sample_ids.json: {len(ids)} ids for {len(raw)} bytes")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gpt2_dir", nargs="?", default=default_gpt2_dir())
    parser.add_argument("--print", metavar="TEXT", dest="text")
    args = parser.parse_args()
    encoder = Gpt2Encoder(args.gpt2_dir)
    if args.text is not None:
        text = args.text.encode("latin-1", "backslashreplace").decode("unicode_escape")
        print(" ".join(map(str, encoder.encode(text))))
        return
    write_reference(encoder, os.path.dirname(os.path.abspath(__file__)))


if __name__ == "__main__":
    main()
