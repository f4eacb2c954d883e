#!/usr/bin/env python3
"""Oracle for strata's NFC (text/unicode_nfc.c; suite "nfc", test/test_nfc.c).

Prints, for every string of a corpus, HEX(utf-8 of s) TAB HEX(utf-8 of
unicodedata.normalize('NFC', s)).  The corpus:

  * every character the tables touch, alone and fully decomposed (NFD):
    characters with a canonical decomposition, with a non-zero combining
    class, every Hangul syllable and conjoining jamo;
  * hand-picked cases: marks out of canonical order, blocked and unblocked
    compositions, composition exclusions, singletons, non-starter
    decompositions, starter + starter pairs, Hangul built from jamo;
  * random strings (fixed seed) over those characters, half of them
    decomposed first, so marks meet bases in every order.

Usage: nfc_check.py [--count] [--unicode VERSION]
  --count    how many lines NFC changes, on stderr
  --unicode  the version strata's tables were made from: when this Python's
             unicodedata is another version, print only "unicode-version V"
             (the two would disagree on characters added in between)
"""
import random
import sys
import unicodedata as ud

HAND = [
    "e\u0301", "a\u0301\u0323", "a\u0323\u0301", "\u1EA0\u0300",   # order, Ạ̀
    "\u00C0\u0323", "o\u031B\u0301", "o\u0301\u031B",                # ờ-like
    "a\u0308\u0308", "a\u05B0\u0301", "a\u0300\u0300\u0301",          # blocked
    "\u0301a", "\u0301", "a\u034F\u0301",                             # no starter, CGJ
    "\u0915\u093C", "\u0958", "\u2ADC", "\u2ADD\u0338", "\uFB2C",     # exclusions
    "\u212B", "\u2126", "\u0340", "\u0341", "\u0343", "\u0374",       # singletons
    "\u0344", "\u0F73", "\u0F75", "\u0F81", "\u0308\u0301",           # non-starter decomp
    "\u0B47\u0B3E", "\u0B47\u0B57", "\u0DD9\u0DCF\u0DCA", "\u0DD9\u0DCA",  # starter pairs
    "\u1100\u1161", "\u1100\u1161\u11A8", "\uAC00\u11A8", "\uAC01\u11A8",   # Hangul
    "\u1100\u11A8", "\u1161\u11A8", "\u1100\u1100\u1161", "\u1112\u1175\u11C2",
    "\u1100\u0301\u1161", "\uD55C\uAD6D\uC5B4", "\u1112\u1161\u11AB\u1100\u116E\u11A8",
    "\U00011099\U000110BA", "\U0001D15E", "\U0001D164", "\U0001D15F\U0001D16E",
    "\uF900", "\U0002F800", "Cafe\u0301 na\u0308ive re\u0301sume\u0301",
    "\u1E9B\u0323", "\u0071\u0307\u0323", "\u0041\u030A\u0301", "A\u0328\u0301\u0306",
    "\u05D0\u05B7\u05BC", "\u0627\u0653", "\u0627\u0655\u0650",
    "\U0001F469\u200D\U0001F4BB e\u0301", "x\u0300\u0315\u031B\u0301",
    "\u3046\u3099", "\u304B\u3099\u309A", "\u30CF\u309A", "\uFF8A\uFF9F",
]


def touched():
    out = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        d = ud.decomposition(c)
        if ((d and not d.startswith("<")) or ud.combining(c) or 0xAC00 <= cp <= 0xD7A3
                or 0x1100 <= cp <= 0x11FF):
            out.append(c)
    return out


def corpus():
    chars = touched()
    for c in chars:
        yield c
        yield ud.normalize("NFD", c)
    yield from HAND
    rnd = random.Random(20261202)
    marks = [c for c in chars if ud.combining(c)]
    jamo = [chr(cp) for cp in range(0x1100, 0x1200)]
    plain = list("aeiouAEIOU nsc") + ["\u4E2D", "\u00E9", "\U0001F600"]
    pools = [chars, marks, marks, jamo, plain, plain]
    for _ in range(4000):
        s = "".join(rnd.choice(rnd.choice(pools)) for _ in range(rnd.randint(1, 10)))
        if rnd.random() < 0.5:
            s = ud.normalize("NFD", s)
        yield s


def main():
    if "--unicode" in sys.argv:
        want = sys.argv[sys.argv.index("--unicode") + 1]
        if want != ud.unidata_version:
            print("unicode-version " + ud.unidata_version)
            return
    changed = total = 0
    out = sys.stdout
    for s in corpus():
        n = ud.normalize("NFC", s)
        changed += n != s
        total += 1
        out.write(s.encode().hex() + "\t" + n.encode().hex() + "\n")
    if "--count" in sys.argv:
        print(f"nfc_check.py: {total} strings, NFC changes {changed}", file=sys.stderr)


if __name__ == "__main__":
    main()
