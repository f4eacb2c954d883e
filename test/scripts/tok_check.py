#!/usr/bin/env python3
"""Independent oracle for strata's tokenizer (test/test_tokenizer.c).

ids mode (default): build a Hugging Face `tokenizers` BPE from the GGUF file's
vocabulary and merges, with a pre-tokenizer equivalent to the file's
`tokenizer.ggml.pre` (smollm: Split on \\p{N} isolated + ByteLevel regex;
gpt-2/default: ByteLevel alone; qwen2/deepseek-r1-qwen: an NFC normalizer,
then Split on the qwen2 regex isolated + ByteLevel without its regex, as
Qwen's tokenizer.json has it; llama-bpe/llama3: the same without the
normalizer), and print, for every corpus string:

    HEX(utf-8 bytes) TAB ids-as-plain-text TAB ids-with-special-tokens-parsed

(ids space-separated).  "Plain text" means control-token text is encoded as
ordinary text (HF: encode_special_tokens = True).

For an SPM vocabulary (`tokenizer.ggml.model = llama`: Gemma) the oracle is a
HF BPE with byte fallback built the way llama.cpp reads the vocabulary: a
space becomes U+2581 (the normalizer; no prefix space when
add_space_prefix is false), every split of a normal token into two tokens
is a merge ranked by the merged token's score (higher first), unknown
characters become <0xNN> byte tokens, user-defined tokens (Gemma's runs
of spaces and newlines, HTML tags) are matched in the raw text before the
merges as non-special added tokens, control tokens as special ones.

pieces mode (--pieces RULE): split every corpus string with the Python
`regex` module and the pre-tokenizer regexes of doc/formats.md §5.3, printing
HEX TAB comma-separated HEX pieces; lets the C test check the qwen2 and
llama3 rules without a Qwen or Llama model.

With --nfd every corpus string is first decomposed (NFD), so a tokenizer
that normalizes has something to do; the printed HEX is of what was encoded.

Usage: tok_check.py [--nfd] GGUF CORPUS    (ids mode)
       tok_check.py --pieces RULE CORPUS    (RULE: gpt2 smollm qwen2 llama3)
"""
import sys
import unicodedata

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
         r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3 = QWEN2.replace(r"|\p{N}|", r"|\p{N}{1,3}|")


def read_corpus(path):
    out = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")[1:]  # first line: header
    for line in lines:
        if line == "":
            continue
        s, i = [], 0
        while i < len(line):
            c = line[i]
            if c == "\\" and i + 1 < len(line):
                n = line[i + 1]
                if n == "u":
                    s.append(chr(int(line[i + 2:i + 6], 16)))
                    i += 6
                    continue
                s.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}[n])
                i += 2
                continue
            s.append(c)
            i += 1
        out.append("".join(s))
    return out


def split_all(pattern, s):
    import regex
    pieces, last = [], 0
    for m in regex.finditer(pattern, s):
        if m.start() > last:
            pieces.append(s[last:m.start()])
        pieces.append(m.group())
        last = m.end()
    if last < len(s):
        pieces.append(s[last:])
    return pieces


def pieces_mode(rule, corpus):
    import regex
    for s in read_corpus(corpus):
        if rule == "smollm":
            parts = []
            for seg in split_all(r"\p{N}", s):
                parts += [seg] if regex.fullmatch(r"\p{N}", seg) else split_all(GPT2, seg)
        else:
            parts = split_all({"gpt2": GPT2, "qwen2": QWEN2, "llama3": LLAMA3}[rule], s)
        print(s.encode().hex() + "\t" + ",".join(p.encode().hex() for p in parts))


def hf_tokenizer(path):
    """The Hugging Face `tokenizers` BPE built from the GGUF file (vocabulary,
    merges, pre-tokenizer name, special tokens); kv_quality.py uses it too."""
    from gguf import GGUFReader
    from tokenizers import (Tokenizer, AddedToken, Regex, models, normalizers,
                            pre_tokenizers, decoders)

    r = GGUFReader(path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    pre = r.fields["tokenizer.ggml.pre"].contents() if "tokenizer.ggml.pre" in r.fields else "default"
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"), byte_level])
    elif pre in ("gpt-2", "default"):
        tok.pre_tokenizer = byte_level
    elif pre in ("qwen2", "deepseek-r1-qwen", "llama-bpe", "llama3"):
        rule = LLAMA3 if pre in ("llama-bpe", "llama3") else QWEN2
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(rule), behavior="isolated"),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        if rule is QWEN2:
            tok.normalizer = normalizers.NFC()
    else:
        sys.exit(f"tok_check.py: pre-tokenizer {pre!r} has no oracle here")
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(tokens[i], special=True, normalized=False)
                for i in range(len(tokens)) if types[i] in (3, 4)]
    tok.add_special_tokens(specials)
    return tok


def hf_spm_tokenizer(r):
    """The HF `tokenizers` oracle for an SPM vocabulary (see the module doc),
    from an open GGUFReader (opening a 262K-token file takes the gguf package
    tens of seconds)."""
    import numpy as np
    from tokenizers import Tokenizer, AddedToken, models, normalizers, decoders

    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    sc, ty = r.fields["tokenizer.ggml.scores"], r.fields["tokenizer.ggml.token_type"]
    scores = np.asarray([sc.parts[i][0] for i in sc.data], dtype=np.float64)
    types = [int(ty.parts[i][0]) for i in ty.data]
    if "tokenizer.ggml.add_space_prefix" in r.fields and \
            r.fields["tokenizer.ggml.add_space_prefix"].contents():
        sys.exit("tok_check.py: SPM with add_space_prefix has no oracle here")
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    merges = []
    for i, t in enumerate(tokens):
        if types[i] != 1 or len(t) < 2:
            continue
        for k in range(1, len(t)):
            a, b = t[:k], t[k:]
            if a in vocab and b in vocab:
                merges.append((-scores[i], i, k, a, b))
    merges.sort()
    unk = next((tokens[i] for i in range(len(tokens)) if types[i] == 2), None)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(m[3], m[4]) for m in merges],
                               byte_fallback=True, unk_token=unk, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                    for i in range(len(tokens)) if types[i] == 4])
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in range(len(tokens)) if types[i] == 3])
    return tok


def ids_mode(path, corpus, nfd):
    from gguf import GGUFReader
    r = GGUFReader(path)
    model = r.fields["tokenizer.ggml.model"].contents()
    tok = hf_spm_tokenizer(r) if model == "llama" else hf_tokenizer(path)
    for s in read_corpus(corpus):
        if nfd:
            s = unicodedata.normalize("NFD", s)
        tok.encode_special_tokens = True
        plain = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        special = tok.encode(s, add_special_tokens=False).ids
        # BPE: the decoded text is the normalized one (NFC for qwen2); SPM's
        # normalizer only maps spaces to U+2581, which its decoder undoes
        want = tok.normalizer.normalize_str(s) if tok.normalizer and model != "llama" else s
        assert tok.decode(plain, skip_special_tokens=False) == want, s
        print(s.encode().hex() + "\t" + " ".join(map(str, plain)) + "\t" +
              " ".join(map(str, special)))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--pieces":
        pieces_mode(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3:
        ids_mode(sys.argv[1], sys.argv[2], False)
    elif len(sys.argv) == 4 and sys.argv[1] == "--nfd":
        ids_mode(sys.argv[2], sys.argv[3], True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
