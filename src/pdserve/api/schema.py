"""Turn the pydantic models into a Kubernetes structural OpenAPI v3 schema.

pydantic emits JSON Schema 2020-12 ($refs, anyOf-with-null, numeric
exclusiveMinimum); a CRD needs OpenAPI v3.0 as Kubernetes restricts it: every
node typed, no $ref, no additionalProperties: false, defaults for nested objects
so the API server defaults them too, and the CEL rules inlined."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from pdserve.api.spec import ApiModel

_DROP = {"title", "additionalProperties"}


class _Generator(GenerateJsonSchema):
    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        factory = schema.get("default_factory")
        inner = self.generate_inner(schema["schema"])
        if factory is None:
            return super().default_schema(schema)
        value = factory()  # type: ignore[call-arg]
        # A nested object defaults to its full default value: the API server checks
        # defaults against the CEL rules before it would fill in the inner defaults.
        if isinstance(value, BaseModel):
            return {**inner, "default": value.model_dump(by_alias=True, exclude_none=True, mode="json")}
        return inner


def _models(model: type[BaseModel], seen: dict[str, type[BaseModel]]) -> dict[str, type[BaseModel]]:
    if model.__name__ in seen:
        return seen
    seen[model.__name__] = model
    for field in model.model_fields.values():
        for arg in _type_args(field.annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                _models(arg, seen)
    return seen


def _type_args(tp: Any) -> list[Any]:
    out = [tp]
    for arg in getattr(tp, "__args__", ()) or ():
        out += _type_args(arg)
    return out


class _Converter:
    def __init__(self, defs: dict[str, Any], models: dict[str, type[BaseModel]]):
        self.defs = defs
        self.models = models

    def convert(self, node: dict[str, Any]) -> dict[str, Any]:
        node = dict(node)
        if "$ref" in node:
            name = node.pop("$ref").rsplit("/", 1)[1]
            target = self.convert(self.defs[name])
            model = self.models.get(name)
            if model is not None and issubclass(model, ApiModel) and model.__cel__:
                target["x-kubernetes-validations"] = [r.to_schema() for r in model.__cel__]
            # The field's own description and default win over the model's.
            return {**target, **{k: v for k, v in self._scalars(node).items()}}
        if "anyOf" in node:
            options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
            rest = self._scalars(node)
            if len(options) == 1:
                return {**self.convert(options[0]), **rest}
            types = sorted(o.get("type") for o in options)
            if types == ["integer", "string"]:
                return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True, **rest}
            raise ValueError(f"cannot express anyOf {options} in a structural schema")
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROP or (key == "default" and value is None):
                continue
            if key == "properties":
                out[key] = {k: self.convert(v) for k, v in value.items()}
            elif key == "items":
                out[key] = self.convert(value)
            elif key == "exclusiveMinimum":
                out["minimum"], out["exclusiveMinimum"] = value, True
            elif key == "exclusiveMaximum":
                out["maximum"], out["exclusiveMaximum"] = value, True
            else:
                out[key] = value
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            out["additionalProperties"] = self.convert(extra)
        elif (extra is True or extra == {}) and "properties" not in node:
            out["x-kubernetes-preserve-unknown-fields"] = True
        if "type" not in out and "x-kubernetes-int-or-string" not in out:
            raise ValueError(f"untyped schema node: {node}")
        if out.get("type") == "object" and "properties" in out and not out.get("required"):
            out.pop("required", None)
        return out

    @staticmethod
    def _scalars(node: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in node.items() if k not in _DROP and k not in ("anyOf", "$ref") and not (k == "default" and v is None)}


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural schema of ``model`` (spec or status), CEL rules included."""
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_Generator, ref_template="#/$defs/{model}")
    defs = raw.pop("$defs", {})
    defs[model.__name__] = raw
    return _ordered(_Converter(defs, _models(model, {})).convert({"$ref": f"#/$defs/{model.__name__}"}))


_FIRST = ("description", "type", "format", "enum", "default")


def _ordered(node: Any) -> Any:
    """Readable key order (description and type first); a fresh copy, so YAML has no aliases."""
    if isinstance(node, list):
        return [_ordered(v) for v in node]
    if not isinstance(node, dict):
        return node
    keys = [k for k in _FIRST if k in node] + [k for k in node if k not in _FIRST]
    return {k: _ordered(node[k]) for k in keys}
