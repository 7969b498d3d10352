#!/usr/bin/env python3
"""Reference ids for tokenizer.json normalizers with Replace steps on a Regex pattern.

Reference data only: qsweep never runs Python on its run path.

The Llama 2 tokenizer.json of tests/tokenizer/data (llama2/tokenizer.json in tokenizers.tar.xz)
with its normalizer replaced by tests/tokenizer/data/regex_replace/<name>.json:
  plain.json   the legacy normalizer with its Replace " " -> "▁" written as a Regex pattern
               (checked here to give the String form's ids, refs/llama2.*.ids)
  rich.json    Prepend "▁", then Regex replaces: space runs to one space, tabs and CR/CRLF to
               LF, every Unicode space separator (\\p{Zs}) to "▁", and a "▁" between two digits
               removed (look-behind and look-ahead)
References: Hugging Face `tokenizers` (encode, add_special_tokens=False, special tokens' text
taken as text) on the five texts: refs/llama2_regex_rich.<text>.ids.

Usage: make_regex_replace_refs.py LLAMA2_TOKENIZER_JSON [--data tests/tokenizer/data]
       (the extracted file is at <build>/tests/tokenizer/data/llama2/tokenizer.json)
Needs: pip install tokenizers.
"""
import argparse
import json
import os

from tokenizers import Tokenizer

TEXTS = {"gpl3": "gpl3.txt", "kjv_esther": "kjv_esther.txt", "llama2c_run": "llama2c_run.c",
         "unicode": "unicode.txt", "whitespace": "whitespace.txt"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("llama2_json")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                                                   "tokenizer", "data"))
    a = ap.parse_args()
    with open(a.llama2_json, encoding="utf-8") as f:
        base = json.load(f)
    for name in ("plain", "rich"):
        with open(os.path.join(a.data, "regex_replace", name + ".json"), encoding="utf-8") as f:
            base["normalizer"] = json.load(f)
        tok = Tokenizer.from_str(json.dumps(base))
        tok.encode_special_tokens = True
        for text, path in TEXTS.items():
            with open(os.path.join(a.data, "texts", path), encoding="utf-8", newline="") as f:
                ids = tok.encode(f.read(), add_special_tokens=False).ids
            line = " ".join(map(str, ids)) + "\n"
            if name == "plain":  # the String form's reference, already there
                with open(os.path.join(a.data, "refs", f"llama2.{text}.ids")) as f:
                    assert f.read() == line, f"{text}: Regex \" \" and String \" \" disagree"
                continue
            with open(os.path.join(a.data, "refs", f"llama2_regex_{name}.{text}.ids"), "w") as f:
                f.write(line)


if __name__ == "__main__":
    main()
