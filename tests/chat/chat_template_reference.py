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

Also renders SNIPPETS, small templates that each exercise one part of the
language, with SNIPPET_CONTEXT ("snippets" in the output).

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


def parallel_tool_turns():
    """Two calls in one assistant message (with content), two tool results."""
    calls = [{"id": f"call_{i}", "type": "function",
              "function": {"name": "get_current_weather",
                           "arguments": {"location": city, "days": i + 1}}}
             for i, city in enumerate(["Ankara", "Kars"])]
    return [
        {"role": "user", "content": "Weather in Ankara and Kars?"},
        {"role": "assistant", "content": "Let me check both.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_0", "content": "{\"t\": 21}"},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\": -3.5}"},
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
    yield "parallel_tool_calls", parallel_tool_turns(), {"tools": TOOLS}
    yield "template_syntax_in_content", [
        {"role": "user", "content": "\n\n{{ not a template }} {% if %} {# x #} <|im_end|>\n  "},
        {"role": "assistant", "content": "  <think>plan</think>\n\nAnswer: {{x}}  "},
        {"role": "user", "content": "\t"}], {}
    yield "documents", [USER], {"documents": [{"title": "Ankara", "text": "Başkent."},
                                              {"title": "İzmir", "text": "Ege."}]}


# firefunction-v2 reads `functions` and `datetime` (undefined: it raises).
FIREFUNCTION_VARS = {"functions": json.dumps(TOOLS[:1]), "datetime": "2026-11-24"}


SNIPPET_CONTEXT = {"messages": [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo"}],
       "d": {"b": 1, "a": [1, 2.5, None, True, "x'y"]}, "s": "Hello, Wörld", "n": 7, "f": 0.1, "e": [], "none": None}
# Small templates, each exercising one part of the language.
SNIPPETS = [
  # whitespace control and HF's trim_blocks / lstrip_blocks
  "a  {%- if true %} b {% endif -%}  c",
  "line1\n    {% if true %}\n    x\n    {% endif %}\nline2",
  "  {{ 'v' }}  \n  {# c #}\nz",
  "{% if true +%}\nkeep{% endif %}\n  {%+ if true %}x{% endif %}",
  "x\n{%- for i in [1,2] %}\n  {{ i }}\n{%- endfor %}\n",
  "a {{- ' b ' -}} c",
  "{#- comment -#}  \n  text",
  "{{ 'a' }}\n{{ 'b' }}\n",
  "{{ '}}' }}{{ {'k': {'v': 1}}['k']['v'] }}",
  # loops
  "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}|{% endfor %}",
  "{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}{{ loop.nextitem is defined }}{% endfor %}",
  "{% for x in e %}x{% else %}empty{% endfor %}",
  "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
  "{% for k, v in d | items %}{{ k }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
  "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
  "{% for i in range(6) if i is odd %}{{ i }}/{{ loop.length }} {% endfor %}",
  "{% for c in 'aö' %}[{{ c }}]{% endfor %}",
  # scoping
  "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
  "{% if true %}{% set y = 3 %}{% endif %}{{ y }}",
  "{% set ns = namespace(c=0) %}{% for i in [1,2,3] %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}",
  "{% set a, b = [1, 2] %}{{ b }}{{ a }}",
  # macros
  "{% macro f(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1) }}|{{ f(1, 2, 3) }}|{{ f(a=5, c=6) }}",
  "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}",
  "{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}",
  "{% set t %}  block {{ 1 + 1 }}  {% endset %}[{{ t }}]{% set u | trim %}  x  {% endset %}[{{ u }}]",
  "{% filter upper %}abc{{ 'd' }}{% endfilter %}",
  # expressions
  "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 4 / 2 }}",
  "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1.5 + 1 }} {{ 1e20 }} {{ 0.00001 }} {{ 1e16 }} {{ 123456789.0 }}",
  "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' in 'cat' }} {{ 1 not in [1] }} {{ 'b' in d }} {{ 1 == 1.0 }} {{ true == 1 }}",
  "{{ 'y' if n > 5 else 'n' }}{{ 'z' if false }}|{{ none or 'dflt' }}{{ 0 and 1 }}{{ not n }}",
  "{{ not 1 is defined }} {{ -1 | abs }} {{ 'a' + s | upper }}",
  "{{ s[0] }}{{ s[-1] }}{{ s[::-1] }}{{ s[1:3] }}{{ s[:-3] }}{{ d.a[1:] }}{{ d.a[::2] }}{{ d['a'][-1] }}",
  "{{ 'a\\tb\\n\\x41\\u00e9\\'' }}{{ \"q\\\"\" }}{{ 'raw\\d' }}{{ 'con' 'cat' }}",
  "{{ d }} {{ d.a }} {{ none }} {{ true }} {{ (1,) }} {{ (1, 'a') }} {{ ['it\\'s', \"q\\\"\"] }}",
  "{{ [1, 2][5] }}|{{ d.zzz }}|{{ d['zzz'] }}|{{ undefined_var }}|{{ undefined_var is defined }}|{{ undefined_var | length }}",
  "{{ d.get('b') }}{{ d.get('q', 'Q') }}{{ d.get('q') }}{{ d.keys() | list }}{{ d.values() | list | length }}",
  # string methods
  "{{ ' x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ ' a'.lstrip() }}|{{ 'a '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}",
  "{{ s.startswith('He') }}{{ s.endswith(('x', 'ld')) }}{{ s.upper() }}{{ s.lower() }}{{ s.replace('l', 'L') }}{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}",
  "{{ s.find('W') }}{{ s.count('l') }}{{ '-'.join(['a', 'b']) }}{{ 'x</think>y'.split('</think>')[-1] }}",
  # filters
  "{{ '  a  ' | trim }}|{{ 'xax' | trim('x') }}|{{ s | length }}|{{ d | length }}|{{ s | lower }}|{{ 'aB cD-eF' | title }}|{{ 'hELLO' | capitalize }}",
  "{{ none | default('x') }}|{{ undefined_var | default('y') }}|{{ '' | default('z', true) }}|{{ 0 | d('w', boolean=true) }}",
  "{{ [1, 2] | join(', ') }}|{{ [1, 2] | first }}|{{ [1, 2] | last }}|{{ e | first }}|{{ 3 | string }}|{{ '42' | int + 1 }}|{{ 'x' | int }}|{{ 3.9 | int }}|{{ '2.5' | float }}",
  "{{ 'abc' | list }}|{{ 'a-b' | replace('-', '+') }}|{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'a'] | unique | list }}|{{ [1, 2] | reverse | list }}",
  "{{ messages | map(attribute='role') | join(',') }}|{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|{{ messages | rejectattr('role', 'eq', 'user') | map(attribute='content') | first }}",
  "{{ [1, none, 2] | select | list }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3] | reject('equalto', 2) | list }}|{{ ['a', 'B'] | map('upper') | list }}",
  "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'ünï\"\\n' | tojson }}|{{ {} | tojson(indent=2) }}|{{ [[]] | tojson(indent=1) }}|{{ f | tojson }}",
  "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, first=true) }}|{{ 'a\\n\\nb' | indent(width=1, blank=true) }}",
  "{{ '<&>' | safe + '<' }}|{{ 'a' + '\"' | safe }}|{{ '<' ~ '>' | safe }}",
  "{{ 'İstanbul ıŞık ÇĞÖÜ Straße ΆΈΑΒΓ άέαβγ Привет ЁЖ' | lower }}|{{ 'istanbul ışık çğöü straße άέαβγ привет ёж ÿ µ ſ' | upper }}",
  "{{ 'ünïcode wörld-x(y' | title }}|{{ 'élan vital'.title() }}|{{ 'éLAN'.capitalize() }}|{{ 'ÇAY' | capitalize }}",
  "{{ d | tojson(indent=0) }}|{{ d.a | tojson(indent='\t') }}|{{ d | tojson(indent=-2) }}",
  "{{ range(9223372036854775806, 9223372036854775807, 5) | list }}{{ range(5, -5, -3) | list }}{{ 'abc'[1::9223372036854775807] }}{{ 'abc'[::-9223372036854775807] }}{{ -9223372036854775807 is divisibleby -1 }}",
  # tests
  "{{ n is number }}{{ n is integer }}{{ f is float }}{{ true is boolean }}{{ true is number }}{{ s is string }}{{ d is mapping }}{{ e is iterable }}{{ s is sequence }}{{ none is none }}{{ n is not none }}",
  "{{ 4 is divisibleby 2 }}{{ 3 is even }}{{ 'a' is in 'abc' }}{{ n is eq 7 }}{{ n is gt 3 }}{{ s is lower }}{{ e is defined }}{{ n is sameas 7 }}",
  "{{ undefined_var is iterable }}{{ undefined_var is mapping }}{{ none is iterable }}{{ (1, 2) is sequence }}",
  # Qwen3's `enable_thinking is defined and enable_thinking is false` (a chat_template_kwargs variable)
  "{{ undefined_var is defined and undefined_var is false }}{{ false is false }}{{ 0 is false }}{{ none is false }}{{ true is true }}{{ 1 is true }}{{ n is false }}",
  # strftime_now and raise_exception are covered elsewhere
]

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
    snippets = []
    for source in SNIPPETS:
        entry = {"source": source}
        try:
            entry.update(ok=True, text=env.from_string(source).render(**SNIPPET_CONTEXT))
        except Exception as e:
            entry.update(ok=False, raised=isinstance(e, Raised), error=f"{type(e).__name__}: {e}")
        snippets.append(entry)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "cases": results,
                   "snippet_context": SNIPPET_CONTEXT, "snippets": snippets}, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
