"""The client side of test_serve.lua: drives a running `zorch serve` with the
openai package (and raw HTTP for malformed requests) and prints one JSON
object of what it saw."""
import json, os, signal, sys, threading, urllib.error, urllib.request
from openai import OpenAI

mode, port = sys.argv[1], int(sys.argv[2])
base = f"http://127.0.0.1:{port}"
c = OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)


def raw(path, body=None, method="POST"):
    req = urllib.request.Request(base + path, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ids(choice):
    return getattr(choice, "token_ids", None) or (choice.model_extra or {}).get("token_ids")


out = {}
if mode == "main":
    prompts = json.loads(sys.argv[3])
    r = c.completions.create(model="m", prompt=prompts[0], max_tokens=12, temperature=0)
    out["completion"] = {"ids": ids(r.choices[0]), "text": r.choices[0].text, "finish": r.choices[0].finish_reason,
                         "usage": [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens]}
    s = c.completions.create(model="m", prompt=prompts[0], max_tokens=12, temperature=0, stream=True)
    out["stream_text"] = "".join(ch.choices[0].text for ch in s if ch.choices)
    msgs = [{"role": "user", "content": "hello"}]
    r = c.chat.completions.create(model="m", messages=msgs, max_tokens=10, temperature=0)
    out["chat"] = {"ids": ids(r.choices[0]), "text": r.choices[0].message.content, "role": r.choices[0].message.role}
    s = c.chat.completions.create(model="m", messages=msgs, max_tokens=10, temperature=0, stream=True)
    out["chat_stream_text"] = "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)
    res = [None] * len(prompts)

    def one(i):
        res[i] = ids(c.completions.create(model="m", prompt=prompts[i], max_tokens=8, temperature=0).choices[0])
    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in ts: t.start()
    for t in ts: t.join()
    out["concurrent"] = res
    out["malformed"] = raw("/v1/completions", b'{"prompt": "ab", ')
    out["after_malformed"] = ids(c.completions.create(model="m", prompt=prompts[0], max_tokens=12, temperature=0).choices[0])
    out["bad_field"] = raw("/v1/completions", json.dumps({"prompt": "x", "max_tokens": 100000}).encode())
    out["too_large"] = raw("/v1/completions", json.dumps({"prompt": "x" * 200000}).encode())
    out["not_found"] = raw("/v1/nothing", b"{}")
    out["wrong_method"] = raw("/v1/completions", None, "GET")
    out["models"] = [m.id for m in c.models.list().data]
    out["health"] = raw("/health", None, "GET")
else:  # stop: a long stream in flight; a second request is over the queue; SIGTERM; the stream ends
    pid = int(sys.argv[3])
    s = c.completions.create(model="m", prompt="ab", max_tokens=int(sys.argv[4]), temperature=0, stream=True)
    n, finish, signalled = 0, None, False
    for ch in s:
        if not ch.choices: continue
        n += 1 if ch.choices[0].finish_reason is None else 0
        finish = ch.choices[0].finish_reason or finish
        if n == 2 and not signalled:
            out["queue_full"] = raw("/v1/completions", json.dumps({"prompt": "x", "max_tokens": 2}).encode())
            os.kill(pid, signal.SIGTERM)
            signalled = True
    out["stream_tokens"], out["finish"] = n, finish
print(json.dumps(out))
