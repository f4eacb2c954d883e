#!/usr/bin/env python3
"""serve_client.py: drive `strata-cli serve` with the official `openai`
client, for test/test_serve.c (suite "serve").

  serve_client.py api BASE_URL
      models, chat (whole and streamed, with usage), completions; prints
      one JSON object with what came back.
  serve_client.py conversations BASE_URL CLIENTS ROUNDS MAX_TOKENS
      CLIENTS threads hold ROUNDS-turn greedy conversations at once (each
      resends the whole history, as OpenAI clients do), then the same
      conversations are replayed one client at a time; prints one JSON
      object: the concurrent and the serial answers, and each turn's
      usage (prompt and cached tokens).

Exits non-zero with a message on anything unexpected."""
import json
import sys
import threading

import openai

FIRST = ["Name a color.", "What is the capital of France?", "Say hello.",
         "Count to three."]
NEXT = ["Tell me more.", "Why?", "And then?"]


def client(base):
    return openai.OpenAI(base_url=base, api_key="test-key", max_retries=0, timeout=600)


def api(base):
    c = client(base)
    out = {}
    out["models"] = [m.id for m in c.models.list().data]
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say hi"}],
                                  max_tokens=8, temperature=0)
    out["chat"] = {"content": r.choices[0].message.content,
                   "finish": r.choices[0].finish_reason,
                   "prompt_tokens": r.usage.prompt_tokens,
                   "completion_tokens": r.usage.completion_tokens}
    text, finish, usage, roles = "", None, None, 0
    for ch in c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say hi"}],
                                        max_tokens=8, temperature=0, stream=True,
                                        stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage
        for choice in ch.choices:
            if choice.delta.role:
                roles += 1
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    out["stream"] = {"content": text, "finish": finish, "roles": roles,
                     "completion_tokens": usage.completion_tokens if usage else -1}
    r = c.completions.create(model="m", prompt="The capital of France is", max_tokens=6,
                             temperature=0)
    out["completion"] = {"text": r.choices[0].text, "finish": r.choices[0].finish_reason,
                         "completion_tokens": r.usage.completion_tokens}
    try:
        client(base).chat.completions.create(model="m", messages=[{"role": "user"}], max_tokens=2)
        out["bad_status"] = 200
    except openai.BadRequestError as e:
        out["bad_status"] = e.status_code
    print(json.dumps(out))


def converse(base, k, rounds, max_tokens, record):
    c = client(base)
    msgs = []
    for r in range(rounds):
        msgs.append({"role": "user",
                     "content": FIRST[k % len(FIRST)] if r == 0 else NEXT[(k + r) % len(NEXT)]})
        resp = c.chat.completions.create(model="m", messages=msgs, max_tokens=max_tokens,
                                         temperature=0)
        a = resp.choices[0].message.content
        d = resp.usage.prompt_tokens_details
        record.append({"answer": a, "prompt": resp.usage.prompt_tokens,
                       "cached": d.cached_tokens if d else 0,
                       "finish": resp.choices[0].finish_reason})
        msgs.append({"role": "assistant", "content": a})


def conversations(base, n, rounds, max_tokens):
    conc = [[] for _ in range(n)]
    errors = []

    def run(k):
        try:
            converse(base, k, rounds, max_tokens, conc[k])
        except Exception as e:  # report, do not hang the test
            errors.append(f"client {k}: {e!r}")
    ts = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        sys.exit("; ".join(errors))
    serial = []
    for k in range(n):
        rec = []
        converse(base, k, rounds, max_tokens, rec)
        serial.append(rec)
    print(json.dumps({"first": FIRST, "next": NEXT, "concurrent": conc, "serial": serial}))


if __name__ == "__main__":
    if sys.argv[1] == "api":
        api(sys.argv[2])
    else:
        conversations(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
