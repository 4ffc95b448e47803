#!/usr/bin/env python3
"""Writes golden_chat.json beside this script: the chat templates *.jinja
beside it (written here in the manner of Llama 3, Llama 2, Mistral,
Qwen2/ChatML and Zephyr's, and one of the rest of the subset zorch.text.jinja
implements) and zorch's own (lua/zorch/text/chat.lua), each rendered over
the conversations with jinja2 as Transformers sets it up (a sandboxed
environment, trim_blocks and lstrip_blocks, raise_exception, its tojson).
  python3 tests/chat/gen_chat.py"""
import json, os, re

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))

def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    def raise_exception(message):
        raise TemplateError(message)
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env

def shipped():
    with open(os.path.join(HERE, "..", "..", "lua", "zorch", "text", "chat.lua"), encoding="utf-8") as f:
        src = f.read()
    return {"zorch:" + k: v for k, v in re.findall(r"(\w+) = \[==\[(.*?)\]==\]", src, re.S)}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "  Be kind.  "}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": " Hello, how can I help? "}, {"role": "user", "content": "Tell me a joke.\n"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c d e"},
     {"role": "assistant", "content": "f"}],
    [{"role": "user", "content": "Café? 日本語 — \"quotes\" and 'single'"}],
    [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "Not allowed by some."}],
]
# with tool calls and results, for the templates named *tools*
TOOL_CONVERSATIONS = [
    [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "tool_calls": [{"function": {"arguments": {"city": "Paris"}, "name": "get_weather"}, "type": "function"}]},
     {"role": "tool", "content": {"temperature": 21, "unit": "C"}}, {"role": "tool", "content": "sunny"}],
    [{"role": "user", "content": "Two calls"},
     {"role": "assistant", "tool_calls": [{"function": {"arguments": {}, "name": "a"}}, {"function": {"arguments": {}, "name": "b"}}]}],
]
TOOLS = [{"description": "Current weather", "name": "get_weather",
          "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"}}]

def main():
    templates = {}
    for fn in sorted(os.listdir(HERE)):
        if fn.endswith(".jinja"):
            with open(os.path.join(HERE, fn), encoding="utf-8") as f:
                templates[fn[:-len(".jinja")]] = f.read()
    templates.update(shipped())
    env = environment()
    cases = []
    for name, src in sorted(templates.items()):
        t = env.from_string(src)
        convs = CONVERSATIONS + TOOL_CONVERSATIONS if "tools" in name else CONVERSATIONS
        for ci, conv in enumerate(convs):
            for agp in (False, True):
                for extra in ({}, {"tools": TOOLS}) if "qwen2" in name or "tools" in name else ({},):
                    kw = dict(messages=conv, add_generation_prompt=agp, bos_token="<s>", eos_token="</s>", **extra)
                    try:
                        out, err = t.render(**kw), None
                    except TemplateError as e:
                        out, err = None, str(e)
                    cases.append({"template": name, "conversation": ci + 1, "add_generation_prompt": agp,
                                  "tools": bool(extra), "output": out, "error": err})
    with open(os.path.join(HERE, "golden_chat.json"), "w", encoding="utf-8") as f:
        json.dump({"conversations": CONVERSATIONS + TOOL_CONVERSATIONS, "tools": TOOLS, "templates": templates, "cases": cases}, f,
                  ensure_ascii=False, indent=1)

if __name__ == "__main__":
    main()
