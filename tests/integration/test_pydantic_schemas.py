"""The JSON Schemas agent frameworks generate, through sparkd's constraint engine: pydantic v2
models of the common field types (URLs, e-mails, UUIDs, dates and times, decimals, enums,
literals, optional and nullable fields, discriminated unions, nested models, bounded lists,
dicts, tuples, IP addresses, secrets), a few schemas in zod-to-json-schema's shapes
(draft-07 tuples, type arrays with null) and in zod 4's (a format beside its pattern). Each must compile (no refusal), and random outputs
drawn through the matcher (build/constrain_tool sample: uniform over the allowed tokens of
the Qwen3 vocabulary, under a token budget that makes every walk end complete) must
validate with jsonschema, Draft 2020-12, formats checked (uri by rfc3986-validator,
date-time and time by rfc3339-validator, the others by jsonschema itself).
"""
import datetime
import decimal
import enum
import ipaddress
import json
import os
import random
import subprocess
import uuid
from pathlib import Path
from typing import Annotated, Literal, Optional, Union

import pytest

from conftest import FIXTURES, REPO

pydantic = pytest.importorskip("pydantic")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("email_validator")  # pydantic's EmailStr needs it to write a schema
from pydantic import (AnyHttpUrl, AnyUrl, AwareDatetime, Base64Str, BaseModel, ConfigDict, EmailStr, Field,  # noqa: E402
                      FutureDate, HttpUrl, IPvAnyAddress, NameEmail, PastDatetime, PaymentCardNumber, SecretStr,
                      UUID1, UUID4, condecimal, confloat, conint, conlist, constr)

TOOL = Path(os.environ.get("SPARKD_BIN", REPO / "build" / "sparkd")).resolve().parent / "constrain_tool"
SAMPLES, MAX_TOKENS = 3, 160


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    street: Annotated[str, Field(max_length=40)]
    city: str
    zip: constr(pattern=r"^\d{5}$")
    country: Literal["US", "DE", "FR"] = "US"


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: conint(ge=0, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool
    website: Optional[HttpUrl] = None


class Fish(BaseModel):
    kind: Literal["fish"]
    water: Literal["salt", "fresh"]


Pet = Annotated[Union[Cat, Dog, Fish], Field(discriminator="kind")]


class TreeNode(BaseModel):
    name: str
    children: conlist("TreeNode", max_length=2) = []


# Every field type, as pydantic annotations; models draw from them.
FIELDS = {
    "http_url": HttpUrl,
    "any_url": AnyUrl,
    "any_http_url": AnyHttpUrl,
    "email": EmailStr,
    "short_email": Annotated[EmailStr, Field(max_length=24)],
    "name_email": NameEmail,
    "id": uuid.UUID,
    "id4": UUID4,
    "id1": UUID1,
    "day": datetime.date,
    "when": datetime.datetime,
    "at": datetime.time,
    "took": datetime.timedelta,
    "aware": AwareDatetime,
    "past": PastDatetime,
    "future": FutureDate,
    "price": decimal.Decimal,
    "amount": condecimal(gt=0, max_digits=8, decimal_places=2),
    "color": Color,
    "level": Level,
    "mode": Literal["fast", "slow"],
    "version": Literal[1, 2, 3],
    "tag": Literal["fixed"],
    "maybe_count": Optional[int],
    "note": Optional[str],
    "nullable_url": Optional[HttpUrl],
    "flag": bool,
    "count": int,
    "ratio": float,
    "percent": conint(ge=0, le=100),
    "unit": confloat(gt=0, lt=1),
    "code": constr(min_length=2, max_length=8),
    "slug": constr(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$"),
    "short_slug": constr(pattern=r"^[a-z]+$", min_length=3, max_length=6),
    "sku": Annotated[str, Field(pattern=r"[A-Z]{3}\d+", max_length=12)],
    "scores": conlist(int, min_length=1, max_length=3),
    "names": list[str],
    "counts": dict[str, int],
    "pair": tuple[int, str],
    "numbers": tuple[float, ...],
    "ip": ipaddress.IPv4Address,
    "ip6": ipaddress.IPv6Address,
    "any_ip": IPvAnyAddress,
    "secret": SecretStr,
    "blob": bytes,
    "b64": Base64Str,
    "card": PaymentCardNumber,
    "address": Address,
    "addresses": conlist(Address, max_length=2),
    "maybe_address": Optional[Address],
    "by_city": dict[str, Address],
    "pet": Pet,
    "pets": conlist(Pet, min_length=1, max_length=2),
    "union": Union[int, str],
    "tree": TreeNode,
}


def pydantic_models():
    """50 generated models of 3-6 fields (each field type in several), then fixed ones."""
    rng = random.Random(35)
    names = sorted(FIELDS)
    models = []
    for i in range(50):
        chosen = rng.sample(names, rng.randint(3, 6))
        if i < len(names):  # every field type at least once
            chosen = [names[i]] + [n for n in chosen if n != names[i]]
        fields = {}
        for j, name in enumerate(chosen):
            annotation = FIELDS[name]
            optional = rng.random() < 0.25
            fields[name] = (Optional[annotation], None) if optional else (annotation, ...)
        extra = "forbid" if i % 3 == 0 else "ignore"
        models.append(pydantic.create_model(f"Model{i}", __config__=ConfigDict(extra=extra), **fields))

    class Quantities(BaseModel):  # multiple_of, as multipleOf: exact by remainder, listed, decimals
        step5: conint(multiple_of=5)
        batch: conint(gt=0, multiple_of=8)
        tick: conint(ge=0, le=300, multiple_of=15)
        cents: confloat(multiple_of=0.01)
        halves: Optional[conint(multiple_of=2)] = None

    class Labels(BaseModel):  # sets of an enum or literals, as uniqueItems
        colors: set[Color]
        levels: frozenset[Level]
        sizes: Annotated[set[Literal["s", "m", "l", "xl"]], Field(min_length=1, max_length=3)]
        flags: Optional[set[bool]] = None

    class Order(BaseModel):
        model_config = ConfigDict(extra="forbid")
        id: UUID4
        placed: datetime.datetime
        customer_email: EmailStr
        items: conlist(Address, min_length=1, max_length=2)
        total: decimal.Decimal
        status: Literal["new", "paid", "shipped"] = "new"
        tracking: Optional[HttpUrl] = None

    class Profile(BaseModel):
        homepage: HttpUrl
        avatar: Annotated[AnyUrl, Field(max_length=60)]
        born: datetime.date
        pet: Pet
        tags: conlist(constr(max_length=10), max_length=3) = []

    models += [Order, Profile, TreeNode, Quantities, Labels]
    return models


# zod-to-json-schema's shapes where they differ from pydantic's.
ZOD = [
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": False,
     "properties": {"url": {"type": "string", "format": "uri"}, "email": {"type": "string", "format": "email", "maxLength": 30},
                    "when": {"type": "string", "format": "date-time"}, "id": {"type": "string", "format": "uuid"},
                    "nick": {"type": ["string", "null"], "minLength": 2, "maxLength": 5},
                    "point": {"type": "array", "minItems": 2, "maxItems": 2, "items": [{"type": "number"}, {"type": "number"}]},
                    "kind": {"type": "string", "enum": ["a", "b"]}, "fixed": {"type": "string", "const": "x"}},
     "required": ["url", "email", "when", "id", "point", "kind", "fixed"]},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {"record": {"type": "object", "additionalProperties": {"type": "number"}},
                                      "union": {"anyOf": [{"type": "string", "format": "ipv4"}, {"type": "string", "format": "ipv6"}]},
                                      "triple": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}],
                                                 "additionalItems": {"type": "boolean"}, "maxItems": 3},
                                      "site": {"type": "string", "format": "uri", "maxLength": 2083}},
     "required": ["record", "union", "triple", "site"], "additionalProperties": False},
]


# zod 4's z.toJSONSchema: string formats carry zod's own pattern beside `format` (the e-mail's
# with lookaheads); the output must meet both, and the field's length bounds.
ZOD4_DATE = (r"(?:(?:\d\d[2468][048]|\d\d[13579][26]|\d\d0[48]|[02468][048]00|[13579][26]00)-02-29|\d{4}-(?:(?:0[13578]|1[02])"
             r"-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|(?:02)-(?:0[1-9]|1\d|2[0-8])))")
ZOD4_EMAIL = r"^(?!\.)(?!.*\.\.)([A-Za-z0-9_'+\-\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\-]*\.)+[A-Za-z]{2,}$"
ZOD4 = [
    {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "additionalProperties": False,
     "properties": {
         "email": {"type": "string", "format": "email", "pattern": ZOD4_EMAIL},
         "contact": {"type": "string", "maxLength": 24, "format": "email", "pattern": ZOD4_EMAIL},
         "id": {"type": "string", "format": "uuid",
                "pattern": r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|"
                           r"00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$"},
         "when": {"type": "string", "format": "date-time",
                  "pattern": "^" + ZOD4_DATE + r"T(?:(?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d+)?)?(?:Z))$"}},
     "required": ["email", "contact", "id", "when"]},
    {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "additionalProperties": False,
     "properties": {
         "day": {"type": "string", "format": "date", "pattern": "^" + ZOD4_DATE + "$"},
         "ip": {"type": "string", "format": "ipv4",
                "pattern": r"^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])$"},
         "site": {"type": "string", "format": "uri"},
         "secure": {"type": "string", "format": "uri", "pattern": "^https://", "maxLength": 40}},
     "required": ["day", "ip", "site", "secure"]},
]


def tokenizer_dir():
    return FIXTURES / "tokenizers" / "qwen3"


def sample(schemas, seed=35):
    assert TOOL.exists(), f"{TOOL} is missing: make build/constrain_tool"
    jobs = "".join(json.dumps({"spec": {"kind": "json_schema", "schema": json.dumps(s)}, "samples": SAMPLES,
                               "seed": seed + i, "max_tokens": MAX_TOKENS}) + "\n" for i, s in enumerate(schemas))
    out = subprocess.run([str(TOOL), "sample", str(tokenizer_dir())], input=jobs.encode(), capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    return [json.loads(line) for line in out.stdout.decode().splitlines()]


def validator(schema):
    """Draft 2020-12 (pydantic's), or the draft a schema names (zod's draft-07)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_format_checker_checks_the_formats():
    # Without rfc3986-validator / rfc3339-validator jsonschema silently passes every uri,
    # date-time and time: make sure they are checked.
    for cls in (jsonschema.Draft202012Validator, jsonschema.Draft7Validator):
        checked = set(cls.FORMAT_CHECKER.checkers)
        for fmt in ("uri", "date-time", "date", "email", "ipv4", "ipv6"):
            assert fmt in checked, (cls.__name__, fmt)
    assert {"time", "uuid"} <= set(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)
    bad = {"uri": "not a uri", "date-time": "2024-13-01T00:00:00Z", "time": "25:00:00Z", "email": "nobody"}
    for fmt, text in bad.items():
        assert not validator({"type": "string", "format": fmt}).is_valid(text), fmt


def test_pydantic_and_zod_schemas_compile_and_every_output_validates():
    models = pydantic_models()
    assert len(models) >= 50
    schemas = [m.model_json_schema() for m in models] + ZOD + ZOD4
    results = sample(schemas)
    refused, invalid, unfinished, outputs = [], [], 0, 0
    for schema, result in zip(schemas, results):
        if "error" in result:
            refused.append((schema.get("title"), result["error"]))
            continue
        unfinished += result["unfinished"]
        v = validator(schema)
        for text in result["outputs"]:
            outputs += 1
            try:
                value = json.loads(text)
            except ValueError as e:
                invalid.append((schema.get("title"), text[:300], f"not JSON: {e}"))
                continue
            errors = [e.message for e in v.iter_errors(value)]
            if errors:
                invalid.append((schema.get("title"), text[:300], errors[:2]))
    print(f"{len(schemas)} schemas compiled, {outputs} outputs validated")
    assert not refused, refused
    assert unfinished == 0
    assert not invalid, invalid[:5]
    assert outputs == SAMPLES * len(schemas)


def test_pydantic_url_bounds_hold_at_the_limit():
    # HttpUrl's maxLength 2083 under a budget that lets the walk reach it; and a short one.
    schema = {"type": "object", "properties": {"u": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083},
                                               "s": {"type": "string", "format": "uri", "minLength": 12, "maxLength": 16}},
              "required": ["u", "s"]}
    result = sample([schema])[0]
    assert "error" not in result, result["error"]
    v = validator(schema)
    for text in result["outputs"]:
        value = json.loads(text)
        assert v.is_valid(value), text
        assert 12 <= len(value["s"]) <= 16
    # Bounds no uuid meets: refused, naming the field.
    bad = sample([{"type": "object", "properties": {"id": {"type": "string", "format": "uuid", "maxLength": 10}}}])[0]
    assert "'id'" in bad.get("error", "") and "maxLength" in bad["error"], bad
