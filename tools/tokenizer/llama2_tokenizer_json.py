#!/usr/bin/env python3
"""Converts a Llama 2 SentencePiece model (tokenizer.model) to a Hugging Face tokenizer.json.

Source of the model: karpathy/llama2.c, file tokenizer.model (the Llama 2 tokenizer, 32000
pieces, BPE with byte fallback), commit 350e04fe35433e6d2941dce5a1f53308f87058eb.
The conversion is transformers' own LlamaConverter (convert_slow_tokenizer.py) in its legacy
mode, which is what meta-llama/Llama-2-7b-hf ships: normalizer Prepend("▁") + Replace(" ", "▁"),
no pre-tokenizer, BPE with merges extracted from the piece scores, byte fallback, <s> added
in front by a TemplateProcessing post-processor (as LlamaTokenizerFast sets it).

With --no-legacy: transformers' non-legacy conversion instead (no normalizer, a Metaspace
pre-tokenizer with prepend_scheme "first" and split false), as newer Llama-2-style checkpoints
ship it.

Usage: llama2_tokenizer_json.py [--no-legacy] tokenizer.model out/tokenizer.json
Needs: pip install transformers sentencepiece protobuf tokenizers (never on qsweep's run path).
"""
import sys

from tokenizers import processors
from transformers.convert_slow_tokenizer import LlamaConverter
from transformers.tokenization_utils_base import generate_merges


class _Extractor:
    """Merges from the piece scores (transformers' generate_merges, as its SentencePiece
    extractor did before v5 changed that class's interface)."""

    def __init__(self, path):
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=path)

    def extract(self, vocab_scores):
        vocab = {self.sp.id_to_piece(i): i for i in range(self.sp.GetPieceSize())}
        return vocab, generate_merges(vocab, vocab_scores)


class _Converter(LlamaConverter):
    SpmExtractor = _Extractor


class _Spm:
    """The few attributes of a slow LlamaTokenizer that LlamaConverter reads."""

    legacy = True
    add_prefix_space = True

    def __init__(self, path):
        import sentencepiece as spm

        self.vocab_file = path
        self.sp = spm.SentencePieceProcessor(model_file=path)

    def convert_ids_to_tokens(self, i):
        return self.sp.id_to_piece(i)


def main():
    args = sys.argv[1:]
    legacy = "--no-legacy" not in args
    src, dst = [a for a in args if a != "--no-legacy"]
    spm_model = _Spm(src)
    spm_model.legacy = legacy
    tok = _Converter(spm_model).converted()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    tok.save(dst)


if __name__ == "__main__":
    main()
