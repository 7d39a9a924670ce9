//! The arguments of a step call, recorded with its attempts for inspection.
//!
//! `#[step]` hands each argument to [`ArgList::push`] through an [`ArgProbe`]: an argument
//! whose type is `Serialize` is recorded as its JSON, any other as a marker naming its type
//! (autoref specialisation picks between [`RecordSerializable`] and [`RecordUnserializable`],
//! so a step may still take a pool or a client). A value that is recorded never fails the
//! step: one that does not serialize, holds a NaN or infinite float (JSON has neither), or
//! passes the [`limits`] is replaced by a marker saying why.
//!
//! The stored document is an array with one entry per parameter, in order:
//!
//! ```json
//! [{"name": "order", "value": {"id": 7}},
//!  {"name": "pool", "type": "sqlx::PgPool", "unrecorded": "not_serializable"}]
//! ```

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::limits::{self, Field};

/// Why an argument was not recorded: the `unrecorded` field of its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unrecorded {
    /// The type does not implement `Serialize`.
    NotSerializable,
    /// Its `Serialize` implementation returned an error.
    SerializeError,
    /// It holds a NaN or infinite float, which JSON cannot represent.
    NonFiniteFloat,
    /// It passes the [`limits`] (too large, too deep, a NUL character).
    ExceedsLimits,
}

impl Unrecorded {
    fn code(self) -> &'static str {
        match self {
            Unrecorded::NotSerializable => "not_serializable",
            Unrecorded::SerializeError => "serialize_error",
            Unrecorded::NonFiniteFloat => "non_finite_float",
            Unrecorded::ExceedsLimits => "exceeds_limits",
        }
    }
}

/// One argument, as `#[step]` hands it over: its JSON, or why there is none.
pub struct RecordedArg {
    type_name: &'static str,
    value: Result<Value, (Unrecorded, Option<String>)>,
}

impl RecordedArg {
    fn of<T: Serialize + ?Sized>(value: &T) -> Self {
        let type_name = std::any::type_name::<T>();
        let value = match serde_json::to_value(value) {
            Err(error) => Err((Unrecorded::SerializeError, Some(error.to_string()))),
            Ok(_) if has_non_finite_float(value) => Err((Unrecorded::NonFiniteFloat, None)),
            Ok(json) => Ok(json),
        };
        RecordedArg { type_name, value }
    }

    fn unserializable<T: ?Sized>() -> Self {
        RecordedArg {
            type_name: std::any::type_name::<T>(),
            value: Err((Unrecorded::NotSerializable, None)),
        }
    }
}

/// A step argument on its way to [`ArgList::push`]; `#[step]` calls
/// `(&ArgProbe(&arg)).__tasks_record_arg()`, which resolves to [`RecordSerializable`] when
/// the argument's type is `Serialize` and to [`RecordUnserializable`] otherwise.
pub struct ArgProbe<'a, T: ?Sized>(pub &'a T);

/// The argument's JSON: chosen for `Serialize` types.
pub trait RecordSerializable {
    /// The argument, recorded.
    fn __tasks_record_arg(&self) -> RecordedArg;
}

impl<T: Serialize + ?Sized> RecordSerializable for ArgProbe<'_, T> {
    fn __tasks_record_arg(&self) -> RecordedArg {
        RecordedArg::of(self.0)
    }
}

/// A marker naming the type: chosen, one auto-reference further, for every other type.
pub trait RecordUnserializable {
    /// The marker of an argument that cannot be recorded.
    fn __tasks_record_arg(&self) -> RecordedArg;
}

impl<T: ?Sized> RecordUnserializable for &ArgProbe<'_, T> {
    fn __tasks_record_arg(&self) -> RecordedArg {
        RecordedArg::unserializable::<T>()
    }
}

/// The arguments of one call, in order.
pub struct ArgList(Vec<Value>);

impl ArgList {
    /// Adds the parameter `name`; a value past the limits becomes a marker.
    pub fn push(&mut self, name: &'static str, arg: RecordedArg) {
        let entry = match arg.value {
            Ok(value) => {
                let entry = Value::Array(vec![json!({ "name": name, "value": value })]);
                // Checked as it will be stored (inside the list), for the depth.
                match limits::check_json(Field::StepArgs, &entry) {
                    Ok(()) => match entry {
                        Value::Array(mut entries) => entries.pop().unwrap_or(Value::Null),
                        other => other,
                    },
                    Err(error) => marker(
                        name,
                        arg.type_name,
                        Unrecorded::ExceedsLimits,
                        Some(error.to_string()),
                    ),
                }
            }
            Err((reason, detail)) => marker(name, arg.type_name, reason, detail),
        };
        self.0.push(entry);
    }

    /// The list as stored. Arguments that fit the limits one by one but not together are
    /// replaced by markers, largest first, until the list fits.
    fn finish(mut self) -> Value {
        loop {
            let list = Value::Array(self.0);
            let Err(error) = limits::check_json(Field::StepArgs, &list) else {
                return list;
            };
            let Value::Array(entries) = list else {
                unreachable!("built as an array just above")
            };
            self.0 = entries;
            let largest = self
                .0
                .iter()
                .enumerate()
                .filter(|(_, entry)| entry.get("value").is_some())
                .max_by_key(|(_, entry)| entry.to_string().len())
                .map(|(index, _)| index);
            let Some(index) = largest else {
                // Only markers left, and still too large: record nothing rather than fail.
                return Value::Array(Vec::new());
            };
            let name = self.0[index]
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let mut replaced = Map::new();
            replaced.insert("name".into(), Value::String(name));
            replaced.insert(
                "unrecorded".into(),
                Value::String(Unrecorded::ExceedsLimits.code().into()),
            );
            replaced.insert(
                "detail".into(),
                Value::String(format!("the arguments together: {error}")),
            );
            self.0[index] = Value::Object(replaced);
        }
    }
}

fn marker(
    name: &str,
    type_name: &'static str,
    reason: Unrecorded,
    detail: Option<String>,
) -> Value {
    let mut entry = Map::new();
    entry.insert("name".into(), Value::String(name.to_owned()));
    entry.insert("type".into(), Value::String(type_name.to_owned()));
    entry.insert("unrecorded".into(), Value::String(reason.code().into()));
    if let Some(detail) = detail {
        // A detail is a message of ours or of a `Serialize` impl: bounded, so the marker
        // itself always fits.
        let detail: String = detail.chars().take(1000).collect();
        entry.insert("detail".into(), Value::String(detail.replace('\0', "")));
    }
    Value::Object(entry)
}

/// What a step call records, filled on its first attempt that runs (a replayed call runs
/// none, and serializes nothing).
pub struct ArgsRecorder {
    on: bool,
    args: Option<Value>,
}

impl ArgsRecorder {
    /// Records the arguments of a call inside a run.
    pub(crate) fn new() -> Self {
        ArgsRecorder {
            on: true,
            args: None,
        }
    }

    /// Records nothing: a step called outside a run.
    pub(crate) fn off() -> Self {
        ArgsRecorder {
            on: false,
            args: None,
        }
    }

    /// Fills the list with `record`, once. `#[step(record_args = false)]` never calls this,
    /// and its attempts store no arguments.
    pub fn record(&mut self, record: impl FnOnce(&mut ArgList)) {
        if self.on && self.args.is_none() {
            let mut list = ArgList(Vec::new());
            record(&mut list);
            self.args = Some(list.finish());
        }
    }

    /// The recorded list, if any.
    pub(crate) fn args(&self) -> Option<Value> {
        self.args.clone()
    }
}

/// Whether serializing `value` writes a NaN or infinite float (which `serde_json` turns
/// into `null`, so the recorded value would not say what the step was called with).
fn has_non_finite_float<T: Serialize + ?Sized>(value: &T) -> bool {
    limits::check_finite(value).is_err()
}

#[cfg(test)]
// The calls spell out what `#[step]` generates, where the borrow selects the fallback.
#[allow(clippy::needless_borrow)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Pool;

    #[derive(Serialize)]
    struct Reading {
        celsius: f64,
    }

    fn recorded(record: impl FnOnce(&mut ArgList)) -> Value {
        let mut recorder = ArgsRecorder::new();
        recorder.record(record);
        recorder.args().expect("recorded")
    }

    #[test]
    fn serializable_arguments_are_recorded_and_others_are_named() {
        use super::{RecordSerializable as _, RecordUnserializable as _};
        let (order, pool) = (json!({"id": 7}), Pool);
        let args = recorded(|list| {
            list.push("order", (&ArgProbe(&order)).__tasks_record_arg());
            list.push("pool", (&ArgProbe(&pool)).__tasks_record_arg());
        });
        assert_eq!(
            args,
            json!([
                {"name": "order", "value": {"id": 7}},
                {"name": "pool", "type": std::any::type_name::<Pool>(), "unrecorded": "not_serializable"},
            ])
        );
    }

    #[test]
    fn non_finite_floats_oversized_and_failing_values_become_markers() {
        use super::RecordSerializable as _;
        let nan = Reading { celsius: f64::NAN };
        let fine = Reading { celsius: 21.5 };
        let huge = "x".repeat(limits::MAX_PAYLOAD_BYTES + 1);
        let mut bad_keys = std::collections::HashMap::new();
        bad_keys.insert((1, 2), 3);
        let args = recorded(|list| {
            list.push("nan", (&ArgProbe(&nan)).__tasks_record_arg());
            list.push("fine", (&ArgProbe(&fine)).__tasks_record_arg());
            list.push("huge", (&ArgProbe(&huge)).__tasks_record_arg());
            list.push("bad_keys", (&ArgProbe(&bad_keys)).__tasks_record_arg());
        });
        let codes: Vec<_> = args
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry.get("unrecorded").and_then(Value::as_str))
            .collect();
        assert_eq!(
            codes,
            [
                Some("non_finite_float"),
                None,
                Some("exceeds_limits"),
                Some("serialize_error")
            ]
        );
        assert_eq!(args[1]["value"], json!({"celsius": 21.5}));
        assert!(limits::check_json(Field::StepArgs, &args).is_ok());
    }

    #[test]
    fn arguments_too_large_together_are_replaced_largest_first() {
        use super::RecordSerializable as _;
        let big = "b".repeat(limits::MAX_PAYLOAD_BYTES * 2 / 3);
        let bigger = "c".repeat(limits::MAX_PAYLOAD_BYTES * 3 / 4);
        let args = recorded(|list| {
            list.push("big", (&ArgProbe(&big)).__tasks_record_arg());
            list.push("bigger", (&ArgProbe(&bigger)).__tasks_record_arg());
            list.push("small", (&ArgProbe(&1_u8)).__tasks_record_arg());
        });
        assert_eq!(args[0]["value"], json!(big));
        assert_eq!(args[1]["unrecorded"], "exceeds_limits");
        assert_eq!(args[2]["value"], 1);
    }

    #[test]
    fn nothing_is_serialized_outside_a_run_or_twice() {
        let mut recorder = ArgsRecorder::off();
        recorder.record(|_| panic!("serialized outside a run"));
        assert_eq!(recorder.args(), None);
        let mut recorder = ArgsRecorder::new();
        recorder.record(|_| {});
        recorder.record(|_| panic!("serialized twice"));
        assert_eq!(recorder.args(), Some(json!([])));
    }
}
