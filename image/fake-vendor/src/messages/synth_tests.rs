//! Every synthesized instance is checked by a real validator (formats asserted), over schemas of
//! each keyword the synthesis claims; hostile schemas end, bounded.

#![allow(clippy::unwrap_used)]

use super::*;
use jsonschema::Draft;
use serde_json::json;

/// The instance for `schema`, after asserting that `draft`'s validator accepts it.
fn valid(draft: Draft, schema: &Value) -> Value {
    let validator = jsonschema::options()
        .with_draft(draft)
        .should_validate_formats(true)
        .build(schema)
        .unwrap();
    let instance = synthesize(schema);
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{instance} against {schema}: {errors:?}");
    instance
}

#[test]
fn s0_objects_fill_their_required_properties_only() {
    let schema = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "count": {"type": "integer"},
            "optional": {"type": "string"},
        },
        "required": ["answer", "count"],
        "additionalProperties": false,
    });
    let instance = valid(Draft::Draft7, &schema);
    assert_eq!(instance, json!({"answer": "x", "count": 0}));
    // Nested, and with properties only named in `required` (any value goes).
    let nested = json!({
        "type": "object",
        "required": ["outer", "free"],
        "properties": {"outer": {
            "type": "object",
            "required": ["inner"],
            "properties": {"inner": {"type": "object", "required": ["leaf"],
                "properties": {"leaf": {"type": "boolean"}}}},
        }},
    });
    assert_eq!(
        valid(Draft::Draft7, &nested),
        json!({"outer": {"inner": {"leaf": false}}, "free": null})
    );
    // minProperties with an additionalProperties schema, and dependencies.
    for schema in [
        json!({"type": "object", "minProperties": 2, "additionalProperties": {"type": "integer", "minimum": 3}}),
        json!({"type": "object", "minProperties": 1, "properties": {"a": {"const": 1}}, "additionalProperties": false}),
        json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}, "b": {"type": "number"}},
            "dependencies": {"a": ["b"]}}),
        json!({"type": "object", "required": ["a"], "dependentRequired": {"a": ["c"]}}),
    ] {
        valid(Draft::Draft7, &schema);
    }
    valid(
        Draft::Draft202012,
        &json!({"type": "object", "required": ["a"], "dependentRequired": {"a": ["c"]}}),
    );
}

#[test]
fn s1_enum_const_and_type_lists() {
    assert_eq!(
        valid(Draft::Draft7, &json!({"enum": ["red", "green"]})),
        json!("red")
    );
    assert_eq!(
        valid(Draft::Draft7, &json!({"const": {"k": [1, 2]}})),
        json!({"k": [1, 2]})
    );
    assert_eq!(
        valid(
            Draft::Draft7,
            &json!({"type": ["null", "integer"], "minimum": 4})
        ),
        json!(4)
    );
    assert_eq!(valid(Draft::Draft7, &json!({"type": "null"})), json!(null));
    assert_eq!(valid(Draft::Draft7, &json!(true)), json!(null));
    assert_eq!(valid(Draft::Draft7, &json!({})), json!(null));
    // A type implied by the keywords alone.
    valid(Draft::Draft7, &json!({"minLength": 3}));
    valid(Draft::Draft7, &json!({"exclusiveMinimum": 7}));
    valid(Draft::Draft7, &json!({"required": ["a"]}));
    valid(Draft::Draft7, &json!({"minItems": 2}));
}

#[test]
fn s2_strings_meet_their_lengths_and_formats() {
    assert_eq!(
        valid(
            Draft::Draft7,
            &json!({"type": "string", "minLength": 5, "maxLength": 7})
        ),
        json!("xxxxx")
    );
    assert_eq!(
        valid(Draft::Draft7, &json!({"type": "string", "maxLength": 0})),
        json!("")
    );
    for format in [
        "date-time",
        "date",
        "time",
        "email",
        "idn-email",
        "hostname",
        "idn-hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "iri-reference",
        "uri-template",
        "uuid",
        "json-pointer",
        "relative-json-pointer",
        "regex",
        "duration",
        "made-up",
    ] {
        valid(Draft::Draft7, &json!({"type": "string", "format": format}));
        valid(
            Draft::Draft202012,
            &json!({"type": "string", "format": format}),
        );
    }
}

#[test]
fn s3_numbers_meet_their_bounds() {
    for schema in [
        json!({"type": "integer", "minimum": 5, "maximum": 10}),
        json!({"type": "integer", "exclusiveMinimum": 0}),
        json!({"type": "integer", "exclusiveMaximum": -3}),
        json!({"type": "integer", "minimum": 10, "multipleOf": 3}),
        json!({"type": "integer", "minimum": -2.5, "maximum": -1.5}),
        json!({"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 1}),
        json!({"type": "number", "minimum": 2.25}),
        json!({"type": "number", "maximum": -7.5}),
        json!({"type": "number", "exclusiveMaximum": 0}),
        json!({"type": "number", "multipleOf": 0.5, "minimum": 1.2}),
    ] {
        valid(Draft::Draft7, &schema);
    }
    assert_eq!(
        valid(
            Draft::Draft7,
            &json!({"type": "integer", "minimum": 10, "multipleOf": 3})
        ),
        json!(12)
    );
    // Draft 4's boolean exclusiveMinimum.
    valid(
        Draft::Draft4,
        &json!({"type": "integer", "minimum": 0, "exclusiveMinimum": true}),
    );
}

#[test]
fn s4_arrays_have_their_min_items_unique_tuples_and_contains() {
    assert_eq!(
        valid(
            Draft::Draft7,
            &json!({"type": "array", "items": {"type": "string"}})
        ),
        json!([])
    );
    for schema in [
        json!({"type": "array", "items": {"type": "string"}, "minItems": 3, "uniqueItems": true}),
        json!({"type": "array", "items": {"type": "integer", "maximum": 0}, "minItems": 3, "uniqueItems": true}),
        json!({"type": "array", "items": {"type": "string", "format": "uuid"}, "minItems": 2, "uniqueItems": true}),
        json!({"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 3, "uniqueItems": true}),
        json!({"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "minItems": 3,
            "additionalItems": {"type": "boolean"}}),
        json!({"type": "array", "contains": {"type": "integer", "minimum": 5}}),
        json!({"type": "array", "minItems": 2, "items": {"type": "object", "required": ["id"],
            "properties": {"id": {"type": "integer"}}}, "uniqueItems": true}),
    ] {
        valid(Draft::Draft7, &schema);
    }
    valid(
        Draft::Draft202012,
        &json!({"type": "array", "prefixItems": [{"const": 1}, {"type": "string"}], "minItems": 3,
            "items": {"type": "null"}}),
    );
}

#[test]
fn s5_refs_and_combinators() {
    let draft7 = json!({
        "type": "object",
        "required": ["a", "b"],
        "properties": {
            "a": {"$ref": "#/definitions/name"},
            "b": {"$ref": "#/definitions/tree"},
        },
        "definitions": {
            "name": {"type": "string", "minLength": 2},
            "tree": {"type": "object", "required": ["label"], "properties": {
                "label": {"$ref": "#/definitions/name"},
                "children": {"type": "array", "items": {"$ref": "#/definitions/tree"}},
            }},
        },
    });
    assert_eq!(
        valid(Draft::Draft7, &draft7),
        json!({"a": "xx", "b": {"label": "xx"}})
    );
    let defs = json!({
        "$defs": {"kind": {"enum": ["one", "two"]}, "odd~name/x": {"type": "integer", "minimum": 1}},
        "type": "object",
        "required": ["k", "n"],
        "properties": {"k": {"$ref": "#/$defs/kind"}, "n": {"$ref": "#/$defs/odd~0name~1x"}},
    });
    assert_eq!(
        valid(Draft::Draft202012, &defs),
        json!({"k": "one", "n": 1})
    );
    for schema in [
        json!({"anyOf": [{"type": "string", "minLength": 3}, {"type": "integer"}]}),
        json!({"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string"}]}),
        json!({"anyOf": [{"type": "null"}, {"type": "string"}]}),
        json!({"allOf": [
            {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}},
            {"required": ["b"], "properties": {"b": {"type": "string", "minLength": 2}}},
            {"properties": {"a": {"minimum": 3}}},
        ]}),
        json!({"type": "object", "properties": {"x": {"type": "string"}},
            "anyOf": [{"required": ["x"]}, {"required": ["y"]}]}),
        json!({"allOf": [{"type": ["string", "integer"]}, {"type": ["integer", "null"]}], "minimum": 2}),
        json!({"allOf": [{"type": "number"}, {"type": "integer", "minimum": 1, "maximum": 9}]}),
        json!({"$ref": "#/definitions/a", "definitions": {"a": {"allOf": [{"$ref": "#/definitions/b"}]},
            "b": {"type": "string", "maxLength": 1}}}),
    ] {
        valid(Draft::Draft7, &schema);
    }
}

#[test]
fn s6_a_claude_code_json_schema_round_trips() {
    // The shape a `--json-schema` test passes: nested objects, arrays of objects, enums.
    let schema = json!({
        "type": "object",
        "properties": {
            "summary": {"type": "string", "description": "one line"},
            "files": {"type": "array", "minItems": 1, "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "lines": {"type": "integer", "minimum": 1},
                    "language": {"type": "string", "enum": ["rust", "python", "other"]},
                },
                "required": ["path", "lines", "language"],
                "additionalProperties": false,
            }},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "verdict": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
        },
        "required": ["summary", "files", "confidence", "verdict"],
        "additionalProperties": false,
        "$schema": "http://json-schema.org/draft-07/schema#",
    });
    assert_eq!(
        valid(Draft::Draft7, &schema),
        json!({"summary": "x", "files": [{"path": "x", "lines": 1, "language": "rust"}],
            "confidence": 0, "verdict": false})
    );
}

#[test]
fn s7_hostile_schemas_end_and_stay_bounded() {
    // A required self-reference has no finite instance: the depth bound ends it.
    let forever =
        json!({"type": "object", "required": ["next"], "properties": {"next": {"$ref": "#"}}});
    let _ = synthesize(&forever);
    // allOf fan-out through refs would be exponential without the node budget.
    let fan = json!({"allOf": [{"$ref": "#"}, {"$ref": "#"}, {"$ref": "#"}]});
    let _ = synthesize(&fan);
    // Huge lengths and counts are cut short.
    let big = json!({"type": "array", "minItems": 1_000_000_000u64,
        "items": {"type": "string", "minLength": 1_000_000_000u64}});
    let out = synthesize(&big);
    assert!(
        out.to_string().len() <= 2 << 20,
        "{}",
        out.to_string().len()
    );
    // Junk where schemas go.
    for junk in [
        json!(5),
        json!("type"),
        json!({"type": 7}),
        json!({"$ref": "https://elsewhere.test/schema"}),
        json!({"$ref": "#/nope"}),
        json!({"$ref": 3, "allOf": "no", "anyOf": []}),
        json!({"type": "integer", "minimum": "five", "multipleOf": -1}),
        json!({"type": "number", "minimum": 1e308, "multipleOf": 1e-308}),
        json!({"properties": [], "required": [1, null], "items": 3}),
        json!({"$ref": "#/definitions/%zz", "definitions": {}}),
    ] {
        let _ = synthesize(&junk);
    }
}
