#!/usr/bin/env python3
"""Seeded random chat-template cases for the differential check against jinja2.

generate(seed, count) returns [{"template": str, "context": dict}, ...]: small templates built
from the constructs chat templates use, aimed at the corners where an engine most easily
drifts from jinja2: missing keys and names, None values, null or list content, filters and
tests applied to undefined values, attribute versus item access, loops over undefined,
loop variables, macros, set and namespace, whitespace control. Contexts are JSON values only,
as a request can carry. Nothing here knows the expected output: the test renders every case
with jinja2 (transformers' environment) and with sparkd, and compares.

Run to print a few cases:  build/venv/bin/python tests/gen/gen_template_cases.py [seed] [count]
"""
import json
import random
import sys

# Names a template may read; each context defines a random subset, so the rest are missing.
NAMES = ["a", "b", "msg", "messages", "items", "d", "n", "s", "flag", "tools"]
KEYS = ["content", "role", "name", "tool_calls", "items", "x", "type", "text", "arguments", "function"]
STRINGS = ["", " ", "hi", " padded \n", "Two\nlines", "é✓ 你好", "<b>&amp;</b>", "a,b", "0", "user", "assistant",
           "tool", "{\"k\": 1}", "It's \"quoted\""]
ROLES = ["system", "user", "assistant", "tool"]

# Filters, with the argument lists they are given. Undefined, None and wrong types reach
# all of them; that is the point.
FILTERS = [
    "length", "count", "default('dflt')", "default('dflt', true)", "d(none)", "default", "join", "join(', ')",
    "join(attribute='content')", "tojson", "tojson(indent=2)", "trim", "upper", "lower", "capitalize", "title",
    "list", "first", "last", "items", "string", "selectattr('role')", "selectattr('role', 'equalto', 'user')",
    "selectattr('content', 'defined')", "selectattr('content', 'none')", "rejectattr('content')",
    "rejectattr('tool_calls', 'defined')", "map(attribute='content')", "map(attribute='role', default='?')",
    "map('upper')", "map('string')", "map('length')", "select", "select('string')", "reject('none')", "reverse",
    "sort", "unique", "replace('a', 'b')", "int", "float", "abs", "round", "wordcount", "indent(2)", "truncate(5)",
    "dictsort", "batch(2)", "sum", "min", "max", "attr('content')", "safe", "e", "center(9)", "format('x')",
    "groupby('role')", "slice(2)", "tojson(sort_keys=true)", "string | length", "list | length",
    "default('') | trim", "default([]) | length", "map(attribute='function.name')",
]
TESTS = ["defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer", "float",
         "boolean", "true", "false", "callable", "odd", "even", "lower", "upper", "in ['user', 'tool']",
         "in 'user assistant'", "eq 'user'", "eq none", "ne ''", "eq 1", "gt 0", "sameas none", "divisibleby 2",
         "equalto 'hi'", "in d", "in items"]
METHODS = ["get('content')", "get('role', 'none')", "get('x', [])", "items()", "keys()", "values()", "strip()",
           "upper()", "startswith('u')", "endswith('\\n')", "split(',')", "split()", "replace('i', 'I')",
           "lstrip()", "rstrip()", "title()", "lower()", "count('a')", "find('i')", "format(1)", "splitlines()",
           "index('x')", "append(1)", "pop()", "update({})", "copy()", "join(['x', 'y'])", "capitalize()"]
LITERALS = ["'x'", "''", "' sp '", "none", "None", "true", "false", "0", "1", "-2", "2.5", "[]", "[1, 'a', none]",
            "{}", "{'content': none, 'role': 'user'}", "{'a': {'b': [1, 2]}}", "('t', 1)", "\"q'uote\"",
            "[{'role': 'user', 'content': 'c'}, {'role': 'tool'}]", "'é✓'", "1e3", "[[]]"]
# Not generated, because sparkd does not model it: range objects used as values (range(3) is a
# list in sparkd; it is only iterated here). Subscripts of literal constants are generated both
# bare, which jinja2 folds while compiling (sparkd folds them the same way, folding.cpp), and
# behind a condition, which it cannot fold.


class CaseGenerator:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.locals = []  # loop and set names currently in scope
        self.macros = []  # (name, parameter count) defined so far
        self.in_loop = 0

    # ---- contexts ---------------------------------------------------------------------------
    def scalar(self):
        r = self.r
        # Integers past 64 bits (Python's int(1e20)) are not modelled: floats stay below 2**63.
        return r.choice([None, None, True, False, 0, 1, -3, 7, 2.5, 1.0, -0.5, 1e15, r.choice(STRINGS), r.choice(STRINGS)])

    def value(self, depth=0):
        r = self.r
        k = r.random()
        if depth >= 3 or k < 0.45:
            return self.scalar()
        if k < 0.6:
            return [self.value(depth + 1) for _ in range(r.randint(0, 3))]
        if k < 0.8:
            return self.message()
        return {key: self.value(depth + 1) for key in r.sample(KEYS, r.randint(0, 4))}

    def content(self):
        r = self.r
        return r.choice([r.choice(STRINGS), r.choice(STRINGS), None, "",
                         [{"type": "text", "text": r.choice(STRINGS)} for _ in range(r.randint(0, 2))],
                         [{"type": "image"}, {"type": "text", "text": "t"}]])

    def message(self):
        """A chat message with optional fields present, null or absent at random."""
        r = self.r
        m = {}
        if r.random() < 0.9:
            m["role"] = r.choice(ROLES)
        if r.random() < 0.8:
            m["content"] = self.content()
        if r.random() < 0.3:
            m["tool_calls"] = r.choice([None, [], [{"type": "function", "function": {
                "name": r.choice(["f", "get_weather"]), "arguments": r.choice([{"city": "Oslo"}, "{\"a\": 1}", {}])},
                **({"id": "call_1"} if r.random() < 0.5 else {})}]])
        if r.random() < 0.2:
            m["name"] = r.choice(["f", None, ""])
        if r.random() < 0.15:
            m["reasoning_content"] = r.choice(["think", None, ""])
        return m

    def context(self):
        r = self.r
        ctx = {}
        for name in NAMES:
            if r.random() < 0.75:
                ctx[name] = self.value()
        if r.random() < 0.6:
            ctx["messages"] = [self.message() for _ in range(r.randint(0, 4))]
        if r.random() < 0.3:
            ctx["add_generation_prompt"] = r.random() < 0.5
        return ctx

    # ---- expressions ------------------------------------------------------------------------
    def name(self):
        r = self.r
        if self.locals and r.random() < 0.4:
            return r.choice(self.locals)
        return r.choice(NAMES + ["missing", "none_here"])

    def key(self):
        return self.r.choice(KEYS)

    def access(self, depth):
        r = self.r
        base = self.primary(depth + 1) if r.random() < 0.3 else self.name()
        if base in LITERALS and r.random() < 0.7:
            base = f"({base} if n else {self.name()})"  # a subscript jinja2 cannot fold
        k = r.random()
        if k < 0.3:
            return f"{base}.{self.key()}"
        if k < 0.55:
            return f"{base}['{self.key()}']"
        if k < 0.7:
            return f"{base}[{r.choice([0, 1, -1, 5])}]"
        if k < 0.78:
            return f"{base}[{r.choice(['1:', ':-1', '::-1', '0:1'])}]"
        if k < 0.9:
            return f"{base}.{r.choice(METHODS)}"
        return f"{base}.{self.key()}.{self.key()}"

    def primary(self, depth):
        r = self.r
        k = r.random()
        if self.in_loop and k < 0.12:
            return r.choice(["loop.index", "loop.index0", "loop.first", "loop.last", "loop.length", "loop.revindex",
                             "loop.previtem", "loop.nextitem", "loop.cycle('odd', 'even')", "loop.depth",
                             "loop.previtem.role", "loop.nextitem['content']", "loop.changed(1)"])
        if self.macros and k < 0.2:
            name, nparams = r.choice(self.macros)
            args = ", ".join(self.expr(depth + 1) for _ in range(r.randint(0, nparams + 1)))
            return f"{name}({args})"
        if k < 0.4 or depth > 2:
            return r.choice([self.name(), self.name(), r.choice(LITERALS)])
        if k < 0.75:
            return self.access(depth)
        return f"({self.expr(depth + 1)})"

    def expr(self, depth=0):
        r = self.r
        if depth > 2:
            return self.primary(depth)
        k = r.random()
        if k < 0.3:
            return self.primary(depth)
        if k < 0.55:
            return f"{self.primary(depth + 1)} | {r.choice(FILTERS)}"
        if k < 0.7:
            neg = "not " if r.random() < 0.25 else ""
            return f"{self.primary(depth + 1)} is {neg}{r.choice(TESTS)}"
        if k < 0.85:
            op = r.choice(["~", "~", "+", "==", "!=", "in", "not in", "and", "or", "<", "*", "-"])
            return f"{self.primary(depth + 1)} {op} {self.primary(depth + 1)}"
        if k < 0.92:
            return f"not {self.primary(depth + 1)}"
        if r.random() < 0.2:
            return f"{self.primary(depth + 1)} if {self.expr(depth + 1)}"
        return f"{self.primary(depth + 1)} if {self.expr(depth + 1)} else {self.primary(depth + 1)}"

    # ---- statements -------------------------------------------------------------------------
    def ws(self):
        """Tag openers and closers, with whitespace control now and then."""
        r = self.r
        return r.choice(["{%", "{%", "{%-", "{%+"]), r.choice(["%}", "%}", "-%}", "+%}"])

    def text(self):
        return self.r.choice(["", "", "|", " ", "\n", "  \n", "x", "\n  ", "<s>", "\t"])

    def stmt(self, depth):
        r = self.r
        o, c = self.ws()
        k = r.random()
        if depth > 1 or k < 0.4:
            lo, lc = r.choice([("{{", "}}"), ("{{", "}}"), ("{{-", "}}"), ("{{", "-}}")])
            return f"{self.text()}{lo} {self.expr()} {lc}{self.text()}"
        if k < 0.5:
            body = self.body(depth + 1)
            out = f"{o} if {self.expr()} {c}{body}"
            if r.random() < 0.3:
                out += f"{o} elif {self.expr()} {c}{self.body(depth + 1)}"
            if r.random() < 0.4:
                out += f"{o} else {c}{self.body(depth + 1)}"
            return out + f"{o} endif {c}"
        if k < 0.68:
            return self.for_loop(depth, o, c)
        if k < 0.78:
            name = r.choice(["v", "w", "content", "a"])
            out = f"{o} set {name} = {self.expr()} {c}"
            self.locals.append(name)
            return out
        if k < 0.85:
            return self.namespace(depth, o, c)
        if k < 0.91:
            return self.macro(depth, o, c)
        if k < 0.94 and self.in_loop:
            return f"{o} {r.choice(['break', 'continue'])} {c}"
        if k < 0.96:
            name = r.choice(["blk", "v"])
            out = f"{o} set {name} {c}{self.body(depth + 1)}{o} endset {c}"
            self.locals.append(name)
            return out
        if k < 0.98:
            return f"{o} filter {r.choice(['upper', 'trim', 'length', 'tojson'])} {c}{self.body(depth + 1)}{o} endfilter {c}"
        return f"{o} with w = {self.expr()} {c}{self.body(depth + 1)}{o} endwith {c}"

    def for_loop(self, depth, o, c):
        r = self.r
        k = r.random()
        if k < 0.2:
            target, iterable = "k, v", r.choice([f"{self.primary(1)}.items()", f"{self.primary(1)} | items",
                                                 f"{self.primary(1)} | dictsort"])
        else:
            target = r.choice(["m", "x", "message"])
            iterable = self.primary(1) if r.random() < 0.9 else f"range({r.choice([0, 2, 3])})"
        cond = f" if {self.expr(2)}" if r.random() < 0.15 else ""
        saved = list(self.locals)
        self.locals += [t.strip() for t in target.split(",")]
        self.in_loop += 1
        body = self.body(depth + 1)
        self.in_loop -= 1
        els = f"{o} else {c}{self.body(depth + 1)}" if r.random() < 0.25 else ""
        self.locals = saved
        return f"{o} for {target} in {iterable}{cond} {c}{body}{els}{o} endfor {c}"

    def namespace(self, depth, o, c):
        r = self.r
        init = r.choice(["", "count=0", "found=false, last=none", f"v={self.expr(2)}"])
        attr = r.choice(["count", "found", "v", "last"])
        out = f"{o} set ns = namespace({init}) {c}{o} set ns.{attr} = {self.expr(1)} {c}"
        self.locals.append("ns")
        if r.random() < 0.5:
            out += f"{{{{ ns.{r.choice(['count', 'found', 'v', 'last'])} }}}}"
        return out

    def macro(self, depth, o, c):
        r = self.r
        name = r.choice(["fmt", "render_msg"])
        params = r.choice([[], ["m"], ["m", "sep=', '"], ["m", "n=none"]])
        saved, saved_loop = list(self.locals), self.in_loop
        self.locals = [p.split("=")[0] for p in params] + ["varargs", "kwargs"]
        self.in_loop = 0
        body = self.body(depth + 1)
        self.locals, self.in_loop = saved, saved_loop
        self.macros.append((name, len(params)))
        return f"{o} macro {name}({', '.join(params)}) {c}{body}{o} endmacro {c}"

    def body(self, depth):
        return "".join(self.stmt(depth) for _ in range(self.r.randint(1, 2)))

    def case(self):
        self.locals, self.macros, self.in_loop = [], [], 0
        template = "".join(self.stmt(0) for _ in range(self.r.randint(1, 2)))
        return {"template": template, "context": self.context()}


def generate(seed, count):
    g = CaseGenerator(seed)
    return [g.case() for _ in range(count)]


if __name__ == "__main__":
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    for case in generate(seed, int(sys.argv[2]) if len(sys.argv) > 2 else 5):
        print(json.dumps(case, ensure_ascii=False))
