#!/usr/bin/env python3
"""jinja_oracle.py: the expected renderings of chat templates, by Python's
jinja2 set up as Hugging Face's apply_chat_template sets it up
(trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception,
strftime_now), for the C suite `jinja` to compare byte for byte.

Usage: jinja_oracle.py TEMPLATE_DIR
Writes records "TAG LEN\\n<LEN bytes>\\n" to stdout: N name, S template
source, G add_generation_prompt ("0"/"1"), R role, C content (one R and C
per message), then O (the rendered text) or X (jinja2 raised: the message),
then ". 0". Every template file in TEMPLATE_DIR is rendered over every
conversation below, and every template of CONSTRUCTS over one conversation.
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

BOS, EOS = "<|bos|>", "<|eos|>"
NOW = 1700000000  # strftime_now's clock, fixed (the C side gets the same)


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


U, A, S = "user", "assistant", "system"
CONVERSATIONS = [
    ([(U, "Hello!")], True),
    ([(U, "Hello!")], False),
    ([(S, "Be brief."), (U, "What is the capital of France?")], True),
    ([(U, "Hi"), (A, "Hello! How can I help?"), (U, "Tell me a joke.")], True),
    ([(S, "You are a pirate."), (U, "Hi"), (A, "Arr!"), (U, "More?"), (A, "Yo ho.")], False),
    ([(U, "  Grüße, 世界! \u00a0\n"), (A, " c'est \"ok\" \\ {{ not jinja }} "),
      (U, "emoji 🎉\ttab\r\nline")], True),
    ([(U, "2+2?"), (A, "<think>\nadd them\n</think>\n\n4"), (U, "and 3+3?")], True),
    ([(U, "one"), (U, "two")], True),  # not alternating: some templates refuse
    ([], True),                         # no messages: most templates fail
]

# Small templates for the constructs the suite checks one by one.
CONSTRUCTS = {
    "loop-vars": "{% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}"
                 "{{ loop.last }}{{ loop.length }}{{ loop.revindex }}|{% endfor %}",
    "for-else": "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in 'ab' %}{{ x }}{% endfor %}",
    "for-filter": "{% for m in messages if m.role == 'user' %}{{ loop.index }}:{{ m.content }};{% endfor %}",
    "for-unpack": "{% for k, v in {'a': 1, 'b': [1, 'x']}.items() %}{{ k }}={{ v }},{% endfor %}"
                  "{% for k, v in {'z': none} | items %}{{ k }}{{ v }}{% endfor %}",
    "break-continue": "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}"
                      "{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "if-elif": "{% for i in range(4) %}{% if i == 0 %}a{% elif i == 1 %}b{% elif i == 2 %}c"
               "{% else %}d{% endif %}{% endfor %}",
    "set-scope": "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"
                 "{% if true %}{% set y = 5 %}{% endif %}{{ y }}",
    "namespace": "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                 "{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.n }} {{ ns.s }}",
    "set-block": "{% set b %}[{{ messages | length }}]{% endset %}{{ b }}{{ b | length }}",
    "macro": "{% macro turn(role, text, end='<e>') %}<{{ role }}>{{ text | trim }}{{ end }}{% endmacro %}"
             "{% for m in messages %}{{ turn(m.role, m.content) }}{{ turn(role='x', text=' y ', end='') }}"
             "{% endfor %}",
    "ws-control": "A  {%- if true -%}  B  {%- endif -%}  C\n  {{- ' D ' -}}  \n E {# c #}\n F {#- c -#}  G",
    "trim-lstrip": "line1\n    {% if true %}\n    inner\n    {% endif %}\nline2\n  {{ 'x' }}\n  {# note #}\nend\n",
    "plus-markers": "a\n    {%+ if true %}b{% endif +%}\nc",
    "string-methods": "{% set s = '  Hello World  ' %}[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}]"
                      "{{ s.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a b c'.split(' ', 1) }}"
                      "{{ s.startswith('  H') }}{{ s.endswith(('x', ' ')) }}{{ 'aBc'.upper() }}{{ 'aBc'.lower() }}"
                      "{{ 'hello wORLD 2x'.title() }}{{ 'abcabc'.replace('b', 'XY') }}{{ 'xxhixx'.strip('x') }}"
                      "{{ 'abc'.find('c') }}{{ 'banana'.count('an') }}{{ '-'.join(['a', 'b']) }}",
    "filters": "{{ '  t  ' | trim }}|{{ [1, 2, 3] | length }}|{{ 'héllo' | length }}|{{ [1, 2] | first }}"
               "{{ [1, 2] | last }}|{{ ['a', 'b'] | join(', ') }}|{{ undefined_thing | default('dflt') }}"
               "|{{ '' | default('e', true) }}|{{ 'MiX' | upper }}{{ 'MiX' | lower }}|{{ 42 | string }}"
               "|{{ '12' | int + 1 }}|{{ 'x' | int }}|{{ 'ab' | list }}|{{ 'hello-world foo' | title }}"
               "|{{ 'word' | capitalize }}|{{ [3, 1, 3] | unique | list }}|{{ [1, 2] | reverse | list }}"
               "|{{ 'abc' | reverse }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ -3 | abs }}",
    "tojson": "{{ {'a': [1, 2.5, none, true], 'b': 'x\"y\\nz', 'u': 'é😀'} | tojson }}"
              "{{ [] | tojson }}{{ {'k': {'n': [1]}} | tojson(indent=2) }}{{ 'ctrl\x01' | tojson }}",
    "select": "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('/') }}"
              "|{{ messages | rejectattr('role', 'equalto', 'user') | list | length }}"
              "|{{ [0, 1, 2, '', 'a'] | select | list }}|{{ [1, 2, 3, 4] | reject('odd') | list }}"
              "|{{ messages | map(attribute='role') | unique | join(',') }}",
    "tests": "{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}"
             "{{ [] is iterable }}{{ 3 is odd }}{{ 4 is even }}{{ 'a' is equalto 'a' }}{{ 2 is in [1, 2] }}"
             "{{ 9 is divisibleby 3 }}{{ 1 is number }}{{ true is boolean }}{{ 1 is integer }}"
             "{{ 'x' is not none }}{{ messages[0] is mapping }}{{ 'AB' is upper }}",
    "operators": "{{ 'a' ~ 1 ~ none }}|{{ 7 // 2 }}{{ -7 // 2 }}{{ 7 % 3 }}{{ -7 % 3 }}{{ 2 ** 10 }}{{ 7 / 2 }}"
                 "|{{ 1 + 2 * 3 }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}|{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}"
                 "|{{ 'b' in 'abc' }}{{ 'x' not in ['x'] }}{{ 'k' in {'k': 1} }}"
                 "|{{ 1 and 'y' }}{{ 0 or 'z' }}{{ not 1 }}|{{ 'yes' if 1 else 'no' }}{{ 'y' if 0 }}|"
                 "{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 0.1 + 0.2 }}{{ 1e20 }}{{ 2.0 }}",
    "slices": "{{ messages[1:] | length }}{{ messages[::-1][0].content }}{{ 'abcdef'[1:4] }}{{ 'abcdef'[::2] }}"
              "{{ 'abcdef'[-2:] }}{{ 'héllo'[1:3] }}{{ [1, 2, 3, 4][::-2] }}{{ 'abc'[-1] }}{{ [1, 2][5] }}",
    "literals": "{{ {'a': 1, 'b': [true, false, none]} }}{{ ('x', 1) }}{{ [('a', 'b')] }}{{ \"it's\" }}"
                "{{ 'say \"hi\"' }}{{ {'q': \"'\"} }}{{ 'a' 'b' }}{{ '\\u00e9\\x41\\t' }}",
    "print-types": "{{ none }}{{ true }}{{ 3 }}{{ -0.5 }}{{ [none, 'x'] }}{{ messages[0] }}",
    "dict-methods": "{% set d = {'a': 1, 'b': 2} %}{{ d.keys() | list }}{{ d.values() | list }}{{ d.get('a') }}"
                    "{{ d.get('z', 'no') }}{{ d['b'] }}{{ d.b }}{{ d | length }}",
    "strftime": "{{ strftime_now('%d %b %Y') }}",
    "raise": "{% if messages | length > 1 %}{{ raise_exception('too many: ' ~ messages | length) }}{% endif %}ok",
    "undefined-attr": "{{ nothing.attr }}",
    "comments-nested": "{# {{ not run }} {% if %} #}x{{ '{{' }}{{ '}}' }}{{ '{%' }}",
    "crlf": "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n",
    "min-max-sum": "{{ [3, 1, 2] | min }}{{ [3, 1, 2] | max }}{{ [1, 2, 3] | sum }}{{ 'a b  c' | wordcount }}",
    "indent": "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(width=3, first=true) }}",
    "nested-loops": "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ loop.index }}"
                    "{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}{% endfor %}{{ loop }}",
    "lstrip-tabs": "x\n\t  {% if true %}y{% endif %}\n \t{# c #}\nz\n  {{ 'v' }}\n{{ 'a' }}\n{{ 'b' }}\n",
    "precedence": "{{ messages | length > 0 }}{{ not messages | length }}{{ -1 | abs }}{{ 2 ** 3 ** 2 }}"
                  "{{ 10 / 4 }}{{ 10 / 5 }}{{ 1 + 2 ~ 3 }}{{ 'a' ~ 1 + 2 }}{{ not 1 == 2 }}{{ 1 if 0 else 2 if 1 else 3 }}",
    "int-float": "{{ 1.5 | int }}{{ '3.7' | int }}{{ '  42  ' | int }}{{ true | int }}{{ '0x1' | int }}"
                 "{{ 2 | float }}{{ '1e2' | float }}{{ 1_000 }}{{ 1e3 }}{{ 0.5 * 3 }}{{ 7.0 // 2 }}{{ -7.5 % 2 }}",
    "json-more": "{{ [1, [2, 3]] | tojson }}{{ {'e': [], 'f': {}, 'g': [{}]} | tojson(indent=2) }}"
                 "{{ {'a': none} | tojson(indent=0) }}{{ 'x' ~ messages[0] }}",
    "split-edge": "{{ ' a b '.split(' ') }}{{ 'a\\nb\\r\\nc'.split('\\n') }}{{ 'Hello'[::-1] }}{{ 'héllo'[::-1] }}"
                  "{{ 'x' * 0 }}{{ [1] * 3 }}{{ '  a  b  '.split() }}{{ 'a,b,c'.split(',', 1) }}{{ ''.split() }}",
    "range-dict-ns": "{{ range(3) | list }}{{ range(1, 10, 3) | list }}{{ range(5, 0, -2) | list }}{{ dict(a=1) }}"
                     "{{ namespace(a=1).a }}{{ range(0) | list }}",
    "macro-defaults": "{% macro f(a, b='?', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ f('x') }}{{ f('x', 'y') }}"
                      "{{ f(c=3, a=1) }}{% macro g() %}{{ caller_thing }}{% endmacro %}{{ g() }}",
    "undefined-ops": "{{ none | string }}{{ none | default('x') }}{{ nope | string }}{{ nope | length }}{{ nope ~ 'a' }}"
                     "{{ nope is none }}{% if nope is not defined or nope %}y{% endif %}{{ nope | default(none) }}"
                     "{% for x in nope %}no{% endfor %}{{ nope | first }}{{ nope | list }}",
    "tuples": "{{ (1, 2) | list }}{{ (1,) }}{{ () }}{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"
              "{{ {'a': 1,} }}{{ [1, 2,] }}{{ \"multi\" \"part\" 'strings' }}",
    "str-methods-2": "{{ 'abc'.startswith('') }}{{ 'a-b_c d'.title() }}{{ 'hello world'.capitalize() }}"
                     "{{ '  x  '.rstrip() ~ '|' }}{{ '\u3000x\u00a0' | trim }}{{ 'x' | replace('', '-') }}"
                     "{{ 'a.b.c'.split('.')[-1] }}{{ 'x'.join('abc') }}{{ 'aaa'.replace('a', 'b', 1) }}",
    "map-select-2": "{{ [{'a': 2}, {'a': 1}] | map(attribute='a') | list }}{{ [{'a': 2}, {'b': 1}] | selectattr('a') | list }}"
                    "{{ [{'a': {'b': 5}}] | map(attribute='a.b') | list }}{{ 'abc' | first }}{{ 'abc' | last }}"
                    "{{ {'b': 1, 'a': 2} | items | list }}{{ {'a': 1} | list }}{{ ['a', ' b '] | map('trim') | join }}"
                    "{{ [1, 2, 3] | select('odd') | list }}{{ [1, 2] | map('string') | join('+') }}",
    "misc-tests": "{{ 7 is divisibleby(7) }}{{ 'x' | upper() }}{{ messages[0]['role'] | upper }}{{ 'abc' is lower }}"
                  "{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ none is sameas none }}{{ 1 is sameas 1 }}{{ 'a' is in 'cat' }}",
    "escapes": "{{ '\\'' }}{{ \"\\\"\" }}{{ '\\\\' }}{{ '\\x41\\101' }}{{ '\\q' }}{{ 'tab\\there' }}{{ '\\N' }}",
    "err-hex-literal": "{{ 0x10 }}",
    "err-leading-dot": "{{ .5 }}",
    "err-loop-outside": "{{ loop.index }}",
    "err-undefined-call": "{{ nothere() }}",
    "err-none-attr": "{{ none.x }}x",
    "err-int-str": "{{ 1 + 'a' }}",
    "err-compare": "{{ 1 < 'a' }}",
    "err-iter-int": "{% for x in 3 %}{% endfor %}",
    "set-in-if-in-loop": "{% for m in messages %}{% if loop.first %}{% set first = m.role %}{% endif %}"
                         "{{ first }}-{% endfor %}",
    "loop-filter-length": "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}"
                          "{{ loop.last }} {% else %}none{% endfor %}",
    "whitespace-mix": "{% for m in messages -%}\n  {{ m.role }}\n{%- endfor %}\n\n  {%- if true +%}\n  kept\n{% endif -%}\n   end",
    "unicode-content": "{% for m in messages %}{{ m.content | length }}:{{ m.content[:3] }}:{{ m.content | upper }};{% endfor %}",
}
CONSTRUCT_CONV = ([(S, "sys"), (U, "Hi"), (A, "Hello"), (U, "Bye")], True)


def record(out, tag, data):
    b = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    out.write(b"%s %d\n" % (tag.encode(), len(b)))
    out.write(b)
    out.write(b"\n")


def emit(out, env, name, src, conv, gen):
    record(out, "N", name)
    record(out, "S", src)
    record(out, "G", "1" if gen else "0")
    msgs = []
    for role, content in conv:
        record(out, "R", role)
        record(out, "C", content)
        msgs.append({"role": role, "content": content})
    try:
        text = env.from_string(src).render(messages=msgs, add_generation_prompt=gen,
                                           bos_token=BOS, eos_token=EOS)
        record(out, "O", text)
    except Exception as e:  # every jinja2 failure: the C side must fail too
        record(out, "X", "%s: %s" % (type(e).__name__, e))
    record(out, ".", "")


def main():
    env = make_env()
    out = sys.stdout.buffer
    folder = sys.argv[1]
    for fn in sorted(os.listdir(folder)):
        if not fn.endswith(".jinja"):
            continue
        with open(os.path.join(folder, fn), "rb") as f:
            src = f.read().decode("utf-8")
        for k, (conv, gen) in enumerate(CONVERSATIONS):
            emit(out, env, "%s#%d" % (fn, k), src, conv, gen)
    for name, src in CONSTRUCTS.items():
        emit(out, env, name, src, *CONSTRUCT_CONV)


if __name__ == "__main__":
    main()
