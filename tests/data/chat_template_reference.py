#!/usr/bin/env python3
"""Renders chat templates with Python's jinja2 as Hugging Face's apply_chat_template does
(transformers' _compile_jinja_template: an ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and loopcontrols, tojson that keeps non-ASCII, raise_exception), for
test_chat_template. Input (argv[1], JSON): a list of {"template", "bos_token", "eos_token",
"messages", "add_generation_prompt"}. Output (stdout, JSON): per case the rendered text, or
{"error": message}."""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    compiled = {}
    out = []
    for case in cases:
        source = case["template"]
        try:
            if source not in compiled:
                compiled[source] = env.from_string(source)
            out.append(compiled[source].render(
                messages=case["messages"], add_generation_prompt=case["add_generation_prompt"],
                bos_token=case["bos_token"], eos_token=case["eos_token"], tools=None))
        except Exception as e:  # noqa: BLE001 - reported to the test, which expects some
            out.append({"error": str(e)})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
