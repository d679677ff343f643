#!/usr/bin/python3
"""Reference renders of chat templates with Debian's python3-jinja2.

Renders every tests/chat/data/chat_templates/*.jinja (or the templates named
on the command line) over a fixed set of conversations the way Hugging Face
transformers' apply_chat_template does:

  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[AssistantTracker, loopcontrols])
  filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=indent,
                                 separators=separators, sort_keys=sort_keys)
  globals["raise_exception"] raises TemplateError(message)
  globals["strftime_now"] = datetime.now().strftime(format)
  render(messages=..., tools=<list or None>, documents=<list or None>,
         add_generation_prompt=..., bos_token=..., eos_token=..., **extra)

(AssistantTracker adds the {% generation %} tag; it is defined here as a
pass-through, as it renders when return_assistant_tokens_mask is off.)

Writes JSON: {"cases": [{"template", "case", "context", "ok", "text" |
"error", "raised"}]}; `context` holds exactly the variables passed to render,
in order, so the C++ test renders the same thing. `raised` is true when the
template itself called raise_exception (then `error` is its message).

Usage: chat_template_reference.py OUT.json TEMPLATE.jinja...
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(jinja2.exceptions.TemplateError):
    pass


class AssistantTracker(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise Raised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [
    {"type": "function", "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string",
                             "description": "The city and country, e.g. İstanbul, Türkiye"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "Temperature unit", "default": "celsius"},
                "days": {"type": "integer", "description": "Forecast days", "minimum": 1,
                         "maximum": 7},
            },
            "required": ["location"],
        },
    }},
    {"type": "function", "function": {
        "name": "search_documents",
        "description": "Search the knowledge base",
        "parameters": {
            "type": "object",
            "properties": {
                "queries": {"type": "array", "items": {"type": "string"},
                            "description": "Queries to run"},
                "filters": {"type": "object", "properties": {
                    "year": {"type": ["integer", "null"], "description": "Year"}},
                    "additionalProperties": {"type": "string"}, "description": "Filters"},
                "exact": {"type": "boolean", "description": "Exact matches only"},
                "limit": {"type": "number", "examples": [5, 10], "description": "At most"},
            },
            "required": ["queries", "exact"],
        },
        "return": {"type": "array", "description": "Matching snippets"},
    }},
]

USER = {"role": "user", "content": "Hello! What is the capital of Türkiye?"}
SYSTEM = {"role": "system", "content": "You are a concise assistant.\n"}
ASSISTANT = {"role": "assistant", "content": "The capital of Türkiye is Ankara."}
USER2 = {"role": "user", "content": "  And its population?  \n"}
NON_ASCII = {"role": "user",
             "content": "Merhaba dünya! 日本語のテキスト 🙂👍🏽 \"double\" 'single' back\\slash\ttab\u3000"}


def tool_turns(arguments_as_string, content_none):
    arguments = {"location": "Ankara, Türkiye", "unit": "celsius"}
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_current_weather",
                         "arguments": json.dumps(arguments, ensure_ascii=False)
                         if arguments_as_string else arguments}}
    assistant = {"role": "assistant", "tool_calls": [call]}
    if content_none:
        assistant["content"] = None
    else:
        assistant["content"] = ""
    return [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What is the weather in Ankara?"},
        assistant,
        {"role": "tool", "tool_call_id": "call_1", "name": "get_current_weather",
         "content": "{\"temperature\": 21, \"condition\": \"güneşli\"}"},
        {"role": "assistant", "content": "It is 21 °C and sunny in Ankara."},
        {"role": "user", "content": "Thanks!"},
    ]


def cases():
    """(name, messages, extra variables) of each conversation."""
    yield "user_only", [USER], {}
    yield "system_user", [SYSTEM, USER], {}
    yield "multi_turn", [SYSTEM, USER, ASSISTANT, USER2], {}
    yield "multi_turn_no_system", [USER, ASSISTANT, USER2], {}
    yield "non_ascii", [NON_ASCII, {"role": "assistant", "content": "Çok güzel — ünïcödé ✓"},
                        NON_ASCII], {}
    yield "roles_not_alternating", [USER, USER2], {}
    yield "empty_messages", [], {}
    yield "date_string", [SYSTEM, USER], {"date_string": "24 Nov 2026"}
    yield "tools", [SYSTEM, USER], {"tools": TOOLS, "date_string": "24 Nov 2026"}
    yield "tool_calls_dict_args", tool_turns(False, False), {"tools": TOOLS}
    yield "tool_calls_string_args", tool_turns(True, False), {"tools": TOOLS}
    yield "tool_calls_none_content", tool_turns(True, True), {"tools": TOOLS}
    yield "documents", [USER], {"documents": [{"title": "Ankara", "text": "Başkent."},
                                              {"title": "İzmir", "text": "Ege."}]}


# firefunction-v2 reads `functions` and `datetime` (undefined: it raises).
FIREFUNCTION_VARS = {"functions": json.dumps(TOOLS[:1]), "datetime": "2026-11-24"}


def contexts():
    for name, messages, extra in cases():
        if name not in ("user_only", "system_user"):
            extra = {**FIREFUNCTION_VARS, **extra}
        for add_generation_prompt in (False, True):
            context = {"messages": messages,
                       "tools": extra.get("tools"),
                       "documents": extra.get("documents"),
                       "add_generation_prompt": add_generation_prompt,
                       "bos_token": "<s>", "eos_token": "</s>"}
            for key, value in extra.items():
                if key not in context:
                    context[key] = value
            yield f"{name}/agp={str(add_generation_prompt).lower()}", context
    # Without the tools / documents variables at all (not how transformers
    # calls, but how other runners do): `is defined` paths.
    yield "bare_user", {"messages": [USER], "add_generation_prompt": True,
                        "bos_token": "<s>", "eos_token": "</s>"}


def main():
    out_path, template_paths = sys.argv[1], sys.argv[2:]
    env = make_env()
    results = []
    for path in template_paths:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        name = path.rsplit("/", 1)[-1]
        template = env.from_string(source)
        for case, context in contexts():
            entry = {"template": name, "case": case, "context": context}
            try:
                entry["text"] = template.render(**context)
                entry["ok"] = True
            except Raised as e:
                entry.update(ok=False, raised=True, error=str(e))
            except Exception as e:  # what jinja2 or Python raised
                entry.update(ok=False, raised=False, error=f"{type(e).__name__}: {e}")
            results.append(entry)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "cases": results}, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
