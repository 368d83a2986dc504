"""JSON schemas of real-world shape for the structured-output tests and benchmark.

Hand-written bases (function signatures, nested objects, arrays of objects, enums,
recursive $ref, formats, numeric ranges, unions) and seeded variations of them, so the
suites can ask for any number of distinct schemas. `schemas(n, seed)` is deterministic.
"""
import copy
import json
import random

BASES = [
    {"type": "object", "properties": {"location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
     "required": ["location"]},
    {"type": "object", "properties": {"query": {"type": "string"}, "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
                                      "safe": {"type": "boolean"}}, "required": ["query", "max_results"]},
    {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {
        "items": {"type": "array", "minItems": 1, "items": {
            "type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                                             "qty": {"type": "integer", "minimum": 1},
                                             "price": {"type": "number", "minimum": 0}},
            "required": ["sku", "qty", "price"]}},
        "currency": {"enum": ["USD", "EUR", "JPY"]}},
     "required": ["items", "currency"]},
    {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
                                                          "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                        "required": ["value"]}},
     "$ref": "#/$defs/node"},
    {"type": "object", "properties": {
        "id": {"type": "string", "format": "uuid"},
        "created": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "ip": {"type": "string", "format": "ipv4"}},
     "required": ["id", "created"]},
    {"type": "object", "properties": {
        "result": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        "status": {"const": "ok"}},
     "required": ["result", "status"]},
    {"type": "object", "properties": {
        "shape": {"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
            {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number"}, "h": {"type": "number"}},
             "required": ["kind", "w", "h"]}]}},
     "required": ["shape"]},
    {"type": "array", "items": {"type": "object", "properties": {"title": {"type": "string"}, "done": {"type": "boolean"}},
                                "required": ["title", "done"]}, "maxItems": 4},
    {"type": "object", "properties": {
        "title": {"type": "string"},
        "sections": {"type": "array", "items": {"type": "object", "properties": {
            "heading": {"type": "string"}, "paragraphs": {"type": "array", "items": {"type": "string"}}},
            "required": ["heading", "paragraphs"]}}},
     "required": ["title", "sections"]},
    {"type": "object", "properties": {
        "point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}], "items": False},
        "label": {"type": ["string", "null"]}},
     "required": ["point", "label"]},
    {"type": "object", "properties": {
        "command": {"type": "string", "enum": ["ls", "cat", "grep", "find", "echo"]},
        "args": {"type": "array", "items": {"type": "string"}},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 600}},
     "required": ["command", "args"]},
    {"$defs": {"expr": {"anyOf": [
        {"type": "integer"},
        {"type": "object", "properties": {"op": {"enum": ["+", "-", "*"]}, "left": {"$ref": "#/$defs/expr"},
                                           "right": {"$ref": "#/$defs/expr"}}, "required": ["op", "left", "right"]}]}},
     "type": "object", "properties": {"expr": {"$ref": "#/$defs/expr"}}, "required": ["expr"]},
    {"type": "object", "properties": {
        "temperature": {"type": "integer", "minimum": -40, "maximum": 60},
        "humidity": {"type": "number", "minimum": 0, "maximum": 100},
        "station": {"type": "string", "maxLength": 8}},
     "required": ["temperature", "humidity", "station"]},
    {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"first": {"type": "string"}, "last": {"type": "string"},
                                                   "address": {"type": "object", "properties": {
                                                       "street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                                                       "required": ["street", "zip"]}},
                 "required": ["first", "last", "address"]}},
     "required": ["user"]},
]

FIELD_TYPES = [
    {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"},
    {"type": "string", "enum": ["low", "medium", "high"]}, {"type": "array", "items": {"type": "integer"}},
    {"type": "string", "format": "date"}, {"type": "integer", "minimum": 0, "maximum": 999},
    {"type": ["integer", "null"]}, {"type": "string", "maxLength": 12},
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]},
]
NAMES = ["id", "name", "count", "score", "label", "kind", "value", "note", "level", "limit", "path", "flag",
         "date", "owner", "size", "mode", "target", "reason", "total", "unit"]


def function_signature(rng):
    """A random tool signature: 1-6 fields of common types, some required."""
    names = rng.sample(NAMES, rng.randint(1, 6))
    props = {n: copy.deepcopy(rng.choice(FIELD_TYPES)) for n in names}
    required = [n for n in names if rng.random() < 0.6]
    return {"type": "object", "properties": props, "required": required}


def schemas(n, seed=0):
    """n distinct schemas: the bases first, then random function signatures."""
    rng = random.Random(seed)
    out, seen = [], set()
    for s in BASES + [function_signature(rng) for _ in range(4 * n)]:
        key = json.dumps(s, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(s)
        if len(out) == n:
            break
    return out


def closed(schema):
    """The schema with additionalProperties: false on every object that leaves it out
    (sparkd's generation policy, spelled out for peers that follow the spec's default)."""
    s = copy.deepcopy(schema)

    def walk(x):
        if isinstance(x, dict):
            if (x.get("type") == "object" or "properties" in x) and "additionalProperties" not in x:
                x["additionalProperties"] = False
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(s)
    return s
