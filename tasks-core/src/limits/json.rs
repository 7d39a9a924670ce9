//! The check of a JSON document: its size, depth and strings walked once, and whether it
//! reads back as its type.

use std::fmt;

use serde_json::Value;

use super::error::{Field, LimitError};
use super::{MAX_ERROR_BYTES, MAX_JSON_DEPTH, MAX_PAYLOAD_BYTES};
#[cfg(doc)]
use crate::limits::check_finite;

/// Checks a JSON payload: no NUL in any string or object key, at most [`MAX_JSON_DEPTH`]
/// deep, at most [`MAX_PAYLOAD_BYTES`] (or [`MAX_ERROR_BYTES`] for [`Field::Error`]) of
/// compact JSON. The walk never goes deeper than the limit, so a document nested far
/// deeper is refused without recursing through it.
pub fn check_json(field: Field, value: &Value) -> Result<(), LimitError> {
    let limit = match field {
        Field::Error => MAX_ERROR_BYTES,
        _ => MAX_PAYLOAD_BYTES,
    };
    let mut walk = Walk {
        field,
        limit,
        bytes: 0,
        path: Vec::new(),
    };
    walk.value(value, 0)
}

/// The state of [`check_json`]'s walk.
struct Walk<'a> {
    field: Field,
    limit: usize,
    /// Compact JSON bytes counted so far.
    bytes: usize,
    /// The keys and indexes down to the current value.
    path: Vec<Segment<'a>>,
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

impl<'a> Walk<'a> {
    fn value(&mut self, value: &'a Value, depth: usize) -> Result<(), LimitError> {
        match value {
            Value::Null => self.count(4),
            Value::Bool(true) => self.count(4),
            Value::Bool(false) => self.count(5),
            Value::Number(number) => {
                let mut counter = Counter(0);
                // Writing to a counter cannot fail.
                let _ = fmt::write(&mut counter, format_args!("{number}"));
                self.count(counter.0)
            }
            Value::String(text) => self.string(text),
            Value::Array(items) => {
                self.enter(depth)?;
                self.count(2 + items.len().saturating_sub(1))?;
                for (index, item) in items.iter().enumerate() {
                    self.path.push(Segment::Index(index));
                    self.value(item, depth + 1)?;
                    self.path.pop();
                }
                Ok(())
            }
            Value::Object(map) => {
                self.enter(depth)?;
                self.count(2 + map.len().saturating_sub(1) + map.len())?;
                for (key, item) in map {
                    self.path.push(Segment::Key(key));
                    self.string(key)?;
                    self.value(item, depth + 1)?;
                    self.path.pop();
                }
                Ok(())
            }
        }
    }

    /// Refuses a container that would be deeper than the limit.
    fn enter(&self, depth: usize) -> Result<(), LimitError> {
        if depth >= MAX_JSON_DEPTH {
            return Err(LimitError::TooDeep {
                field: self.field,
                path: self.pointer(),
                limit: MAX_JSON_DEPTH,
            });
        }
        Ok(())
    }

    fn string(&mut self, text: &str) -> Result<(), LimitError> {
        if text.contains('\0') {
            return Err(LimitError::Nul {
                field: self.field,
                path: self.pointer(),
            });
        }
        let escaped: usize = text
            .chars()
            .map(|c| match c {
                '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
                c if (c as u32) < 0x20 => 6,
                c => c.len_utf8(),
            })
            .sum();
        self.count(escaped + 2)
    }

    fn count(&mut self, bytes: usize) -> Result<(), LimitError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > self.limit {
            return Err(LimitError::TooLarge {
                field: self.field,
                bytes: self.bytes,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// The JSON Pointer of the current value.
    fn pointer(&self) -> String {
        let mut pointer = String::new();
        for segment in &self.path {
            pointer.push('/');
            match segment {
                Segment::Key(key) => pointer.push_str(&key.replace('~', "~0").replace('/', "~1")),
                Segment::Index(index) => pointer.push_str(&index.to_string()),
            }
        }
        if pointer.is_empty() {
            pointer.push('/');
        }
        pointer
    }
}

/// Counts the bytes written to it.
struct Counter(usize);

impl fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// Checks that `value`, the JSON of a `T`, decodes back into a `T`: a value that serialized
/// lossily (a NaN or infinite float becomes `null`) or that `T` would refuse is refused
/// before it is stored. Returns the decoding error. A `null` that decodes (a NaN inside an
/// `Option<f64>` reads back as `None`) passes: run [`check_finite`] on the typed value
/// before serializing it for that.
pub fn check_round_trip<T: serde::de::DeserializeOwned>(
    value: &Value,
) -> Result<(), serde_json::Error> {
    T::deserialize(value).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::check_text;
    use serde_json::json;

    fn nested(depth: usize) -> Value {
        let mut value = json!(1);
        for _ in 0..depth {
            value = Value::Array(vec![value]);
        }
        value
    }

    #[test]
    fn the_size_count_is_the_compact_json_length() {
        let values = [
            json!(null),
            json!({ "a": [1, 2.5, -3, true, false, null], "é\"\n\u{1}": "x\\y\u{1f}" }),
            json!([[], {}, "", 1e300, u64::MAX, i64::MIN]),
        ];
        for value in values {
            let mut walk = Walk {
                field: Field::Input,
                limit: usize::MAX,
                bytes: 0,
                path: Vec::new(),
            };
            walk.value(&value, 0).unwrap();
            assert_eq!(walk.bytes, value.to_string().len(), "{value}");
        }
    }

    #[test]
    fn depth_is_accepted_up_to_the_limit_and_decodes() {
        let at_limit = nested(MAX_JSON_DEPTH);
        check_json(Field::Input, &at_limit).unwrap();
        let text = at_limit.to_string();
        let _: Value = serde_json::from_str(&text).unwrap();
        for depth in [MAX_JSON_DEPTH + 1, 128, 10_000] {
            let deep = nested(depth);
            assert!(matches!(
                check_json(Field::Input, &deep),
                Err(LimitError::TooDeep { .. })
            ));
            // A Value this deep would overflow the stack when dropped recursively.
            std::mem::forget(deep);
        }
    }

    #[test]
    fn nul_is_refused_in_strings_and_keys_with_its_path() {
        let error = check_json(Field::Context, &json!({ "a": ["ok", "x\u{0}"] })).unwrap_err();
        assert_eq!(
            error,
            LimitError::Nul {
                field: Field::Context,
                path: "/a/1".into()
            }
        );
        assert!(check_json(Field::Input, &json!({ "k\u{0}": 1 })).is_err());
        assert!(check_text(Field::WorkflowName, "a\0b", 255).is_err());
    }
}
