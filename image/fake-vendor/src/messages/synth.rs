//! An instance of a JSON Schema, for the fake model's `StructuredOutput` call: the common draft 7
//! (and 2019-09/2020-12) subset, best effort beyond it (`pattern`, `not`, `if` are ignored).
//! Bounded in depth and size whatever the schema, so a hostile one costs little and never panics.

use serde_json::{Map, Number, Value};

/// Nesting of schemas followed (`$ref`, `allOf`, properties, items) before giving up with `null`.
const MAX_DEPTH: usize = 32;
/// Schema nodes visited and values made, in all: a budget against `allOf` and `$ref` fan-out.
const MAX_NODES: usize = 10_000;
/// Characters in all strings made (`minLength` beyond it is not met).
const MAX_CHARS: usize = 1 << 20;
/// Items in one array (`minItems` beyond it is not met).
const MAX_ITEMS: u64 = 1024;

/// A value that validates against `schema`, where the schema is satisfiable within the subset:
/// `type` (the first non-null of a list), `properties` with `required` (only the required ones
/// are filled, so `additionalProperties: false` holds), `minProperties`, `dependencies`, `enum`
/// (the first value), `const`, `items` (`minItems` of them), `prefixItems`, `contains`,
/// `uniqueItems`, `minLength`/`maxLength`, the numeric bounds and `multipleOf`, common `format`s,
/// local `$ref` (`#/definitions/..`, `#/$defs/..`, any `#/` pointer), `allOf` (merged), `anyOf` and
/// `oneOf` (the first branch). The schema `true` (or `{}`) gives `null`.
pub fn synthesize(schema: &Value) -> Value {
    Synth {
        root: schema,
        nodes: 0,
        chars: 0,
    }
    .value(schema, 0, 0)
}

struct Synth<'a> {
    root: &'a Value,
    nodes: usize,
    chars: usize,
}

impl<'a> Synth<'a> {
    /// `variant` makes sibling items differ, for `uniqueItems`: 0 is the plain answer.
    fn value(&mut self, schema: &Value, depth: usize, variant: u64) -> Value {
        self.nodes += 1;
        if depth > MAX_DEPTH || self.nodes > MAX_NODES {
            return Value::Null;
        }
        // `true`, `false` (nothing validates: null will do as well as anything) or not a schema.
        let Some(map) = schema.as_object() else {
            return Value::Null;
        };
        if let Some(value) = map.get("const") {
            return value.clone();
        }
        if let Some(Value::Array(options)) = map.get("enum") {
            if !options.is_empty() {
                let at = usize::try_from(variant).unwrap_or(0) % options.len();
                return options[at].clone();
            }
        }
        if needs_merge(map) {
            let merged = self.merged(map, depth);
            return self.value(&Value::Object(merged), depth + 1, variant);
        }
        match primary_type(map) {
            Some("object") => self.object(map, depth, variant),
            Some("array") => self.array(map, depth, variant),
            Some("string") => self.string(map, variant),
            Some("integer") => number(map, true, variant),
            Some("number") => number(map, false, variant),
            Some("boolean") => Value::Bool(variant % 2 == 1),
            _ => Value::Null,
        }
    }

    /// A local `$ref` target: a JSON pointer into the root (`#` is the root itself).
    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        let root: &'a Value = self.root;
        let pointer = reference.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(root);
        }
        root.pointer(&percent_decode(pointer))
    }

    /// `map` with its `$ref`, `allOf` and the first `anyOf`/`oneOf` branch folded in, so what
    /// remains has none of them at the top.
    fn merged(&mut self, map: &Map<String, Value>, depth: usize) -> Map<String, Value> {
        let mut out = Map::new();
        self.merge_into(&mut out, map, depth);
        out
    }

    fn merge_into(&mut self, out: &mut Map<String, Value>, map: &Map<String, Value>, depth: usize) {
        self.nodes += 1 + map.len();
        if depth > MAX_DEPTH || self.nodes > MAX_NODES {
            return;
        }
        for (key, value) in map {
            match key.as_str() {
                "$ref" => {
                    let target = value.as_str().and_then(|r| self.resolve(r));
                    if let Some(target) = target.and_then(Value::as_object) {
                        self.merge_into(out, target, depth + 1);
                    }
                }
                "allOf" => {
                    for branch in value.as_array().into_iter().flatten() {
                        if let Some(branch) = branch.as_object() {
                            self.merge_into(out, branch, depth + 1);
                        }
                    }
                }
                "anyOf" | "oneOf" => {
                    let first = value.as_array().and_then(|a| a.first());
                    if let Some(branch) = first.and_then(Value::as_object) {
                        self.merge_into(out, branch, depth + 1);
                    }
                }
                // Only ever looked up from the root.
                "definitions" | "$defs" => {}
                _ => merge_keyword(out, key, value),
            }
        }
    }

    fn object(&mut self, map: &Map<String, Value>, depth: usize, variant: u64) -> Value {
        let properties = map.get("properties").and_then(Value::as_object);
        let additional = map.get("additionalProperties");
        let closed = additional == Some(&Value::Bool(false));
        let mut names: Vec<String> = Vec::new();
        let want = |name: &str, names: &mut Vec<String>| {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        };
        for name in map
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            want(name, &mut names);
        }
        // A present property may require others (`dependencies` arrays, `dependentRequired`).
        let mut i = 0;
        while i < names.len() && names.len() < MAX_NODES {
            for key in ["dependencies", "dependentRequired"] {
                let needs = map
                    .get(key)
                    .and_then(|d| d.get(&names[i]))
                    .and_then(Value::as_array);
                for name in needs.into_iter().flatten().filter_map(Value::as_str) {
                    want(name, &mut names);
                }
            }
            i += 1;
        }
        let min_properties = map
            .get("minProperties")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(MAX_ITEMS);
        let min_properties = usize::try_from(min_properties).unwrap_or(0);
        for name in properties.into_iter().flat_map(|p| p.keys()) {
            if names.len() >= min_properties {
                break;
            }
            want(name, &mut names);
        }
        let mut extra = 0;
        while names.len() < min_properties && !closed {
            extra += 1;
            want(&format!("property{extra}"), &mut names);
        }
        let mut out = Map::new();
        for name in names {
            let schema = properties
                .and_then(|p| p.get(&name))
                .or(additional.filter(|a| a.is_object()));
            let value = match schema {
                Some(schema) => self.value(schema, depth + 1, variant),
                None => Value::Null,
            };
            out.insert(name, value);
        }
        Value::Object(out)
    }

    fn array(&mut self, map: &Map<String, Value>, depth: usize, variant: u64) -> Value {
        let max = map.get("maxItems").and_then(Value::as_u64);
        let mut count = map.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let contains = map.get("contains");
        if contains.is_some() && count == 0 && max != Some(0) {
            count = 1;
        }
        let count = count.min(MAX_ITEMS);
        // A tuple (`prefixItems`, or a draft 7 `items` array), then the schema for the rest.
        let (tuple, rest) = match (map.get("prefixItems"), map.get("items")) {
            (Some(Value::Array(tuple)), rest) => (tuple.as_slice(), rest),
            (_, Some(Value::Array(tuple))) => (tuple.as_slice(), map.get("additionalItems")),
            (_, rest) => (&[][..], rest),
        };
        let unique = map.get("uniqueItems") == Some(&Value::Bool(true));
        let mut out = Vec::new();
        for i in 0..count {
            let index = usize::try_from(i).unwrap_or(usize::MAX);
            let item = tuple
                .get(index)
                .or(rest)
                .cloned()
                .unwrap_or(Value::Bool(true));
            let item = match contains {
                Some(contains) if i == 0 => {
                    let mut both = Map::new();
                    both.insert(
                        "allOf".to_owned(),
                        Value::Array(vec![item, contains.clone()]),
                    );
                    Value::Object(both)
                }
                _ => item,
            };
            let variant = if unique { i } else { variant };
            out.push(self.value(&item, depth + 1, variant));
        }
        Value::Array(out)
    }

    fn string(&mut self, map: &Map<String, Value>, variant: u64) -> Value {
        let format = map.get("format").and_then(Value::as_str);
        if let Some(sample) = format.and_then(|f| format_sample(f, variant)) {
            return Value::String(sample);
        }
        let min = map
            .get("minLength")
            .and_then(Value::as_u64)
            .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let max = map
            .get("maxLength")
            .and_then(Value::as_u64)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        let mut text = "x".to_owned();
        if variant > 0 {
            text.push_str(&variant.to_string());
        }
        let room = MAX_CHARS.saturating_sub(self.chars);
        let length = text.len().max(min).min(room);
        // Only ASCII here, so bytes are characters (what the length keywords count).
        while text.len() < length {
            text.push('x');
        }
        if let Some(max) = max {
            text.truncate(max);
        }
        self.chars += text.len();
        Value::String(text)
    }
}

fn needs_merge(map: &Map<String, Value>) -> bool {
    map.get("$ref").is_some_and(Value::is_string)
        || map.get("allOf").is_some_and(Value::is_array)
        || ["anyOf", "oneOf"].iter().any(|k| {
            map.get(*k)
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
        })
}

/// `key: value` into a merged schema: what every `allOf` branch asks of one instance.
fn merge_keyword(out: &mut Map<String, Value>, key: &str, value: &Value) {
    let Some(old) = out.get(key) else {
        out.insert(key.to_owned(), value.clone());
        return;
    };
    let merged = match key {
        "properties" => match (old.as_object(), value.as_object()) {
            (Some(old), Some(new)) => {
                let mut props = old.clone();
                for (name, schema) in new {
                    let both = match props.remove(name) {
                        Some(prior) => {
                            let mut all = Map::new();
                            all.insert(
                                "allOf".to_owned(),
                                Value::Array(vec![prior, schema.clone()]),
                            );
                            Value::Object(all)
                        }
                        None => schema.clone(),
                    };
                    props.insert(name.clone(), both);
                }
                Value::Object(props)
            }
            _ => return,
        },
        "required" => {
            let mut names = old.as_array().cloned().unwrap_or_default();
            for name in value.as_array().into_iter().flatten() {
                if !names.contains(name) {
                    names.push(name.clone());
                }
            }
            Value::Array(names)
        }
        "type" => {
            let common: Vec<Value> = types(old)
                .into_iter()
                .filter_map(|a| types(value).into_iter().find_map(|b| narrower(a, b)))
                .map(|t| Value::String(t.to_owned()))
                .collect();
            match common.len() {
                0 => return,
                1 => common.into_iter().next().unwrap_or(Value::Null),
                _ => Value::Array(common),
            }
        }
        "minimum" | "exclusiveMinimum" | "minLength" | "minItems" | "minProperties" => {
            match (old.as_f64(), value.as_f64()) {
                (Some(a), Some(b)) if b > a => value.clone(),
                _ => return,
            }
        }
        "maximum" | "exclusiveMaximum" | "maxLength" | "maxItems" | "maxProperties" => {
            match (old.as_f64(), value.as_f64()) {
                (Some(a), Some(b)) if b < a => value.clone(),
                _ => return,
            }
        }
        "additionalProperties" if value == &Value::Bool(false) => value.clone(),
        "items" if old.is_object() && value.is_object() => {
            let mut all = Map::new();
            all.insert(
                "allOf".to_owned(),
                Value::Array(vec![old.clone(), value.clone()]),
            );
            Value::Object(all)
        }
        // The first branch's word stands.
        _ => return,
    };
    out.insert(key.to_owned(), merged);
}

fn types(value: &Value) -> Vec<&str> {
    match value {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The type both allow: the same, or `integer` within `number`.
fn narrower<'t>(a: &'t str, b: &'t str) -> Option<&'t str> {
    match (a, b) {
        _ if a == b => Some(a),
        ("integer", "number") | ("number", "integer") => Some("integer"),
        _ => None,
    }
}

/// `type` (the first non-null of a list), else what the keywords present imply.
fn primary_type(map: &Map<String, Value>) -> Option<&str> {
    match map.get("type") {
        Some(Value::String(t)) => return Some(t),
        Some(Value::Array(ts)) => {
            let named = || ts.iter().filter_map(Value::as_str);
            return named().find(|t| *t != "null").or_else(|| named().next());
        }
        _ => {}
    }
    let has = |keys: &[&str]| keys.iter().any(|k| map.contains_key(*k));
    if has(&[
        "properties",
        "required",
        "additionalProperties",
        "minProperties",
    ]) {
        Some("object")
    } else if has(&["items", "prefixItems", "minItems", "contains"]) {
        Some("array")
    } else if has(&["minLength", "maxLength", "pattern", "format"]) {
        Some("string")
    } else if has(&[
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    ]) {
        Some("number")
    } else {
        None
    }
}

/// A valid string of a common `format`; `None` for one not known (a plain string then).
fn format_sample(format: &str, variant: u64) -> Option<String> {
    Some(match format {
        "date-time" => "2024-01-01T00:00:00Z".to_owned(),
        "date" => "2024-01-01".to_owned(),
        "time" => "00:00:00Z".to_owned(),
        "duration" => "P1D".to_owned(),
        "email" | "idn-email" => format!("user{variant}@example.com"),
        "hostname" | "idn-hostname" => format!("host{variant}.example.com"),
        "ipv4" => "192.0.2.1".to_owned(),
        "ipv6" => "2001:db8::1".to_owned(),
        "uri" | "iri" | "url" => format!("https://example.com/{variant}"),
        "uri-reference" | "iri-reference" => format!("/{variant}"),
        "uri-template" => "https://example.com/{id}".to_owned(),
        "uuid" => format!(
            "00000000-0000-4000-8000-{:012x}",
            variant & 0xffff_ffff_ffff
        ),
        "json-pointer" => format!("/{variant}"),
        "relative-json-pointer" => "0".to_owned(),
        "regex" => "x".to_owned(),
        _ => return None,
    })
}

/// A number within `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum` (a number, or the
/// draft 4 boolean), a multiple of `multipleOf`: 0 if it is allowed, else next to a bound.
fn number(map: &Map<String, Value>, integer: bool, variant: u64) -> Value {
    let get = |key: &str| {
        map.get(key)
            .and_then(Value::as_f64)
            .filter(|n| n.is_finite())
    };
    let flag = |key: &str| map.get(key) == Some(&Value::Bool(true));
    // (bound, exclusive): the tighter of the inclusive and exclusive forms.
    let tighter_low = |a: Option<(f64, bool)>, b: Option<(f64, bool)>| match (a, b) {
        (Some(a), Some(b)) => Some(if b.0 > a.0 || (b.0 == a.0 && b.1) {
            b
        } else {
            a
        }),
        (a, b) => a.or(b),
    };
    let tighter_high = |a: Option<(f64, bool)>, b: Option<(f64, bool)>| match (a, b) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 || (b.0 == a.0 && b.1) {
            b
        } else {
            a
        }),
        (a, b) => a.or(b),
    };
    let low = tighter_low(
        get("minimum").map(|n| (n, flag("exclusiveMinimum"))),
        get("exclusiveMinimum").map(|n| (n, true)),
    );
    let high = tighter_high(
        get("maximum").map(|n| (n, flag("exclusiveMaximum"))),
        get("exclusiveMaximum").map(|n| (n, true)),
    );
    let step = get("multipleOf").filter(|m| *m > 0.0);
    let (low, high) = if integer {
        (
            low.map(|(n, ex)| if ex { n.floor() + 1.0 } else { n.ceil() }),
            high.map(|(n, ex)| if ex { n.ceil() - 1.0 } else { n.floor() }),
        )
    } else {
        // Strictly inside an exclusive bound: halfway to the other bound, or 1 past it.
        let nudge = |(n, ex): (f64, bool), other: Option<(f64, bool)>, dir: f64| {
            if !ex {
                n
            } else if let Some((m, _)) = other {
                (n + m) / 2.0
            } else {
                n + dir
            }
        };
        (
            low.map(|l| nudge(l, high, 1.0)),
            high.map(|h| nudge(h, low, -1.0)),
        )
    };
    let within = |n: f64| low.is_none_or(|l| n >= l) && high.is_none_or(|h| n <= h);
    let mut value = if within(0.0) {
        0.0
    } else {
        low.or(high).unwrap_or(0.0)
    };
    if let Some(m) = step {
        let up = (value / m).ceil() * m;
        let down = (value / m).floor() * m;
        value = if within(up) { up } else { down };
    }
    // Variants step away from the first answer while they stay in bounds.
    let by = step.unwrap_or(1.0) * variant as f64;
    if variant > 0 && within(value + by) {
        value += by;
    } else if variant > 0 && within(value - by) {
        value -= by;
    }
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        Value::Number(Number::from(value as i64))
    } else {
        Number::from_f64(value).map_or(Value::Null, Value::Number)
    }
}

/// A `$ref` fragment is a URI fragment: `%25` and friends decode before the JSON pointer.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).and_then(|&b| hex(b)),
            bytes.get(i + 2).and_then(|&b| hex(b)),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'%'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

#[cfg(test)]
#[path = "synth_tests.rs"]
mod tests;
