#!/usr/bin/python3
"""Load test of `lattice serve` on loopback: N concurrent clients for S seconds.

Each client keeps one HTTP connection and sends, back to back, Megatron API requests
(PUT /api, one prompt, --tokens tokens, alternately greedy and sampled with a seed) or, with
--openai, POST /v1/completions. Prints requests/s, generated tokens/s, p50/p99 latency, the
number of errors (any non-200 answer or a broken connection; resets and refused connections
also counted apart) and the server's RSS before and after (from /proc/PID/status), then one line
    RESULT {"requests_per_s":...,"p50_ms":...,"p99_ms":...,"errors":0,"rss_before_mib":...}

With --slowloris N, N more clients send request heads one byte a second (reconnecting when the
server cuts them) for the whole run; the line counts how often they were cut.

Usage: serve_load.py --port P --pid PID [--clients 64] [--seconds 30] [--tokens 16]
                     [--slowloris N] [--openai]
"""

import argparse
import http.client
import json
import random
import socket
import threading
import time

messages = []  # the first few errors, to say what went wrong
PROMPTS = ["The cat", "Q: Why did the chicken cross the road?", "Never", "A bird in the hand",
           "I think", "Love is", "The best way to", "Computers are", "Today", "You will"]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def slowloris(a, deadline, cuts, lock):
    head = b"PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    while time.monotonic() < deadline:
        try:
            s = socket.create_connection(("127.0.0.1", a.port), timeout=2)
        except OSError:
            time.sleep(0.5)
            continue
        s.settimeout(1.0)
        at = 0
        try:
            while time.monotonic() < deadline:
                s.send(head[at % len(head):at % len(head) + 1])
                at += 1
                try:
                    if not s.recv(4096):
                        break
                    break  # the server answered (408): it cut this client
                except socket.timeout:
                    pass
        except OSError:
            pass
        finally:
            s.close()
        if time.monotonic() < deadline:
            with lock:
                cuts[0] += 1


def client(i, a, deadline, latencies, errors, tokens, lock):
    rng = random.Random(i)
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=600)
    n = 0
    while time.monotonic() < deadline:
        prompt = rng.choice(PROMPTS)
        if a.openai:
            path, method = "/v1/completions", "POST"
            body = {"prompt": prompt, "max_tokens": a.tokens, "temperature": 0.8, "seed": n}
        else:
            path, method = "/api", "PUT"
            body = {"prompts": [prompt], "tokens_to_generate": a.tokens, "random_seed": n}
            if n % 2 == 0:
                body["top_k"] = 1
        n += 1
        start = time.monotonic()
        try:
            conn.request(method, path, json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            ok = r.status == 200
            if not ok:
                with lock:
                    if len(messages) < 5:
                        messages.append(f"HTTP {r.status}: {data[:200]!r}")
            if ok:
                j = json.loads(data)
                got = (j["usage"]["completion_tokens"] if a.openai else
                       len(j["segments"][0]))
        except Exception as e:  # a broken connection counts as an error; reconnect
            ok = False
            with lock:
                if isinstance(e, ConnectionResetError):
                    errors[1] += 1
                if isinstance(e, ConnectionRefusedError):
                    errors[2] += 1
                if len(messages) < 5:
                    messages.append(repr(e))
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=600)
        elapsed = time.monotonic() - start
        with lock:
            if ok:
                latencies.append(elapsed)
                tokens[0] += got
            else:
                errors[0] += 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--openai", action="store_true")
    p.add_argument("--slowloris", type=int, default=0)
    a = p.parse_args()
    before = rss_mib(a.pid)
    latencies, errors, tokens, lock = [], [0, 0, 0], [0], threading.Lock()
    cuts = [0]
    start = time.monotonic()
    deadline = start + a.seconds
    threads = [threading.Thread(target=client, args=(i, a, deadline, latencies, errors, tokens, lock))
               for i in range(a.clients)]
    threads += [threading.Thread(target=slowloris, args=(a, deadline, cuts, lock))
                for _ in range(a.slowloris)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    after = rss_mib(a.pid)
    latencies.sort()
    q = lambda f: 1e3 * latencies[min(len(latencies) - 1, int(f * len(latencies)))] if latencies else float("nan")
    res = {"clients": a.clients, "seconds": round(wall, 1), "requests": len(latencies),
           "requests_per_s": round(len(latencies) / wall, 2),
           "tokens_per_s": round(tokens[0] / wall, 1),
           "p50_ms": round(q(0.50), 1), "p99_ms": round(q(0.99), 1), "errors": errors[0],
           "resets": errors[1], "refused": errors[2], "slowloris": a.slowloris,
           "slowloris_cut": cuts[0],
           "rss_before_mib": round(before, 1), "rss_after_mib": round(after, 1)}
    print(f"{a.clients} clients, {wall:.1f} s: {res['requests']} requests "
          f"({res['requests_per_s']}/s, {res['tokens_per_s']} segments tokens/s), "
          f"p50 {res['p50_ms']} ms, p99 {res['p99_ms']} ms, errors {res['errors']} "
          f"(resets {errors[1]}, refused {errors[2]}), slowloris {a.slowloris} cut {cuts[0]} times, "
          f"server RSS {before:.1f} -> {after:.1f} MiB")
    for m in messages:
        print("error:", m)
    print("RESULT " + json.dumps(res, separators=(",", ":")))


if __name__ == "__main__":
    main()
