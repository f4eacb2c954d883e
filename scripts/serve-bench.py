#!/usr/bin/env python3
"""serve-bench.py: load a running `strata-cli serve` with growing conversations.

N clients at once, each holding an R-round conversation: every round sends
the whole history plus a new user message (as OpenAI clients do), streamed,
and records the time to the first token, the tokens generated and the
usage (prompt and cached tokens).  Prints, per round and overall: TTFT p50
and p90, decode tok/s per client (median) and total (all tokens over the
wall time), and the share of prompt tokens that were cached (kept in a slot
or restored from the conversation cache instead of read).

    build/strata-cli serve --port 8080 --batch 8 &
    scripts/serve-bench.py --url http://127.0.0.1:8080 -n 16 -r 4 --max-tokens 64

Standard library only."""
import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse

TOPICS = ["the sea", "mountains", "a city at night", "bread", "trains", "the moon", "rivers",
          "libraries", "winter", "bees", "clocks", "bridges", "gardens", "storms", "maps",
          "lighthouses"]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def turn(url, key, msgs, max_tokens, temperature):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=600)
    body = json.dumps({"messages": msgs, "max_tokens": max_tokens, "temperature": temperature,
                       "stream": True, "stream_options": {"include_usage": True}})
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, headers)
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    text, usage, t_first, t_last = "", None, None, None
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                continue
            c = json.loads(ev[6:])
            if c.get("usage"):
                usage = c["usage"]
            for ch in c.get("choices", []):
                piece = (ch.get("delta") or {}).get("content") or ""
                if piece:
                    now = time.perf_counter()
                    t_first = t_first or now
                    t_last = now
                    text += piece
    conn.close()
    return {"text": text, "usage": usage, "ttft": (t_first or time.perf_counter()) - t0,
            "decode_s": (t_last - t_first) if t_first and t_last else 0.0}


def client(args, k, results, errors):
    msgs = [{"role": "system", "content": "You are a concise assistant."}]
    for r in range(args.rounds):
        q = (f"Tell me something about {TOPICS[k % len(TOPICS)]}." if r == 0
             else "Go on, tell me more.")
        msgs.append({"role": "user", "content": q})
        try:
            res = turn(args.url, args.api_key, msgs, args.max_tokens, args.temperature)
        except Exception as e:
            errors.append(f"client {k} round {r + 1}: {e}")
            return
        res["round"] = r
        results.append(res)
        msgs.append({"role": "assistant", "content": res["text"]})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("-n", "--clients", type=int, default=8)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--api-key", default="")
    args = ap.parse_args()
    results, errors = [], []
    t0 = time.perf_counter()
    ts = [threading.Thread(target=client, args=(args, k, results, errors))
          for k in range(args.clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    for e in errors:
        print("error:", e)
    print(f"{args.clients} clients x {args.rounds} rounds, max_tokens {args.max_tokens}: "
          f"{len(results)} answers in {wall:.1f} s")
    print(f"{'round':>5} {'TTFT p50':>9} {'p90':>7} {'tok/s/client':>13} {'prompt':>7} "
          f"{'cached':>7} {'share':>6}")
    rows = [(str(r + 1), [x for x in results if x["round"] == r]) for r in range(args.rounds)]
    rows.append(("all", results))
    for name, xs in rows:
        if not xs:
            continue
        ttft = [x["ttft"] for x in xs]
        rates = [(x["usage"]["completion_tokens"] - 1) / x["decode_s"] for x in xs
                 if x["usage"] and x["decode_s"] > 0 and x["usage"]["completion_tokens"] > 1]
        prompt = sum(x["usage"]["prompt_tokens"] for x in xs if x["usage"])
        cached = sum(x["usage"]["prompt_tokens_details"]["cached_tokens"] for x in xs
                     if x["usage"])
        print(f"{name:>5} {pct(ttft, 50):8.3f}s {pct(ttft, 90):6.3f}s "
              f"{statistics.median(rates) if rates else 0:13.1f} {prompt:7d} {cached:7d} "
              f"{100.0 * cached / max(prompt, 1):5.1f}%")
    gen = sum(x["usage"]["completion_tokens"] for x in results if x["usage"])
    print(f"total: {gen} tokens generated, {gen / wall:.1f} tok/s over the wall time")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
