//! Finding a NaN or infinite float in a typed value before it is serialized for storage.
//!
//! JSON has neither, and `serde_json` writes both as `null` without an error. A `null` where
//! a bare `f64` was does not decode again, which the round-trip checks catch, but one inside
//! an `Option<f64>` does: it decodes as `None`. So `Some(f64::NAN)` would be stored as
//! `null` and read back as `None`, and a replay would disagree with the first execution.
//! [`check_finite`] walks the value with a serializer that writes nothing and stops at the
//! first non-finite `f32` or `f64`, naming where it is.

use std::fmt;

use serde::Serialize;

/// A NaN or infinite float found in a value by [`check_finite`]: JSON cannot hold it, and
/// `serde_json` would store it as `null`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{} is {value}, which JSON cannot hold (it would be stored as null and read back differently)",
    if path.is_empty() { "the value" } else { path.as_str() }
)]
pub struct NonFiniteFloat {
    /// JSON Pointer to the float in the value's JSON (`""` is the value itself).
    pub path: String,
    /// The float.
    pub value: f64,
}

/// Checks that serializing `value` writes no NaN or infinite float (struct fields, sequence
/// items, map values and keys, enum variants, options: everything its `Serialize` writes).
/// Cheap: nothing is written or allocated unless a float is found. A value whose
/// `Serialize` fails is not refused here; serializing it reports that.
pub fn check_finite<T: Serialize + ?Sized>(value: &T) -> Result<(), NonFiniteFloat> {
    match value.serialize(Probe) {
        Err(Found::NonFinite { value, mut path }) => {
            path.reverse();
            let mut pointer = String::new();
            for segment in path {
                pointer.push('/');
                pointer.push_str(&segment.replace('~', "~0").replace('/', "~1"));
            }
            Err(NonFiniteFloat {
                path: pointer,
                value,
            })
        }
        Ok(()) | Err(Found::Other) => Ok(()),
    }
}

/// A serializer that writes nothing and stops at the first non-finite float.
struct Probe;

/// Why the probe stopped.
#[derive(Debug)]
enum Found {
    /// A non-finite float, with the path segments from it up to the root (innermost first:
    /// they are pushed while the error travels out).
    NonFinite { value: f64, path: Vec<String> },
    /// The value's own `Serialize` failed.
    Other,
}

impl Found {
    fn within(self, segment: impl FnOnce() -> String) -> Self {
        match self {
            Found::NonFinite { value, mut path } => {
                path.push(segment());
                Found::NonFinite { value, path }
            }
            Found::Other => Found::Other,
        }
    }
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("probe")
    }
}

impl std::error::Error for Found {}

impl serde::ser::Error for Found {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Found::Other
    }
}

fn float(value: f64) -> Result<(), Found> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(Found::NonFinite {
            value,
            path: Vec::new(),
        })
    }
}

macro_rules! ignore_scalars {
    ($($method:ident($ty:ty);)*) => {
        $(fn $method(self, _: $ty) -> Result<(), Found> { Ok(()) })*
    };
}

impl serde::Serializer for Probe {
    type Ok = ();
    type Error = Found;
    type SerializeSeq = Compound;
    type SerializeTuple = Compound;
    type SerializeTupleStruct = Compound;
    type SerializeTupleVariant = Compound;
    type SerializeMap = Compound;
    type SerializeStruct = Compound;
    type SerializeStructVariant = Compound;

    ignore_scalars! {
        serialize_bool(bool); serialize_i8(i8); serialize_i16(i16); serialize_i32(i32);
        serialize_i64(i64); serialize_i128(i128); serialize_u8(u8); serialize_u16(u16);
        serialize_u32(u32); serialize_u64(u64); serialize_u128(u128); serialize_char(char);
        serialize_str(&str); serialize_bytes(&[u8]); serialize_unit_struct(&'static str);
    }

    fn serialize_f32(self, v: f32) -> Result<(), Found> {
        float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Found> {
        float(v)
    }
    fn serialize_none(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Found> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        // JSON: `{"Variant": value}`.
        value
            .serialize(self)
            .map_err(|found| found.within(|| variant.to_owned()))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound, Found> {
        Ok(Compound::default())
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound, Found> {
        Ok(Compound::default())
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound, Found> {
        Ok(Compound::default())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound, Found> {
        Ok(Compound {
            variant: Some(variant),
            ..Compound::default()
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound, Found> {
        Ok(Compound::default())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound, Found> {
        Ok(Compound::default())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound, Found> {
        Ok(Compound {
            variant: Some(variant),
            ..Compound::default()
        })
    }
}

/// The state of a sequence, map, struct or variant being probed: where its next item is.
#[derive(Default)]
struct Compound {
    /// The index of the next item of a sequence or tuple.
    index: usize,
    /// The last map key, as JSON would write it (`None` for a key that is no scalar).
    key: Option<String>,
    /// The variant of an enum's tuple or struct variant: JSON nests it under its name.
    variant: Option<&'static str>,
}

impl Compound {
    fn element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Found> {
        let index = self.index;
        self.index += 1;
        let variant = self.variant;
        value.serialize(Probe).map_err(|found| {
            let found = found.within(|| index.to_string());
            match variant {
                Some(variant) => found.within(|| variant.to_owned()),
                None => found,
            }
        })
    }

    fn field<T: ?Sized + Serialize>(&mut self, name: &str, value: &T) -> Result<(), Found> {
        let variant = self.variant;
        value.serialize(Probe).map_err(|found| {
            let found = found.within(|| name.to_owned());
            match variant {
                Some(variant) => found.within(|| variant.to_owned()),
                None => found,
            }
        })
    }
}

macro_rules! probe_sequences {
    ($($trait:ident::$method:ident;)*) => {$(
        impl serde::ser::$trait for Compound {
            type Ok = ();
            type Error = Found;
            fn $method<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Found> {
                self.element(value)
            }
            fn end(self) -> Result<(), Found> {
                Ok(())
            }
        }
    )*};
}

probe_sequences! {
    SerializeSeq::serialize_element;
    SerializeTuple::serialize_element;
    SerializeTupleStruct::serialize_field;
    SerializeTupleVariant::serialize_field;
}

impl serde::ser::SerializeMap for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Found> {
        // A float key is checked like any float (`serde_json` writes finite ones as text).
        key.serialize(Probe)?;
        self.key = key.serialize(KeyText).ok();
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Found> {
        let key = self.key.take();
        value
            .serialize(Probe)
            .map_err(|found| found.within(|| key.unwrap_or_else(|| "?".to_owned())))
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl serde::ser::SerializeStruct for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        self.field(name, value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl serde::ser::SerializeStructVariant for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        self.field(name, value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

/// The text of a scalar map key, as a path segment; anything else is refused (and named
/// `?` in the path).
struct KeyText;

macro_rules! key_as_text {
    ($($method:ident($ty:ty);)*) => {
        $(fn $method(self, v: $ty) -> Result<String, Found> { Ok(v.to_string()) })*
    };
}

impl serde::Serializer for KeyText {
    type Ok = String;
    type Error = Found;
    type SerializeSeq = serde::ser::Impossible<String, Found>;
    type SerializeTuple = serde::ser::Impossible<String, Found>;
    type SerializeTupleStruct = serde::ser::Impossible<String, Found>;
    type SerializeTupleVariant = serde::ser::Impossible<String, Found>;
    type SerializeMap = serde::ser::Impossible<String, Found>;
    type SerializeStruct = serde::ser::Impossible<String, Found>;
    type SerializeStructVariant = serde::ser::Impossible<String, Found>;

    key_as_text! {
        serialize_bool(bool); serialize_i8(i8); serialize_i16(i16); serialize_i32(i32);
        serialize_i64(i64); serialize_i128(i128); serialize_u8(u8); serialize_u16(u16);
        serialize_u32(u32); serialize_u64(u64); serialize_u128(u128); serialize_char(char);
        serialize_str(&str); serialize_f32(f32); serialize_f64(f64);
    }

    fn serialize_bytes(self, _: &[u8]) -> Result<String, Found> {
        Err(Found::Other)
    }
    fn serialize_none(self) -> Result<String, Found> {
        Err(Found::Other)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<String, Found> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<String, Found> {
        Err(Found::Other)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<String, Found> {
        Err(Found::Other)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<String, Found> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<String, Found> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<String, Found> {
        Err(Found::Other)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Found> {
        Err(Found::Other)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Found> {
        Err(Found::Other)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Found> {
        Err(Found::Other)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Found> {
        Err(Found::Other)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Found> {
        Err(Found::Other)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Found> {
        Err(Found::Other)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Found> {
        Err(Found::Other)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use serde::Serialize;

    use super::*;

    #[derive(Serialize)]
    struct Reading {
        label: String,
        value: Option<f64>,
        history: Vec<Option<f32>>,
    }

    #[derive(Serialize)]
    enum Shape {
        Point,
        Circle(f64),
        Pair(f64, f64),
        Rect { w: f64, h: f64 },
    }

    fn reading(value: Option<f64>, history: Vec<Option<f32>>) -> Reading {
        Reading {
            label: "r/~".into(),
            value,
            history,
        }
    }

    fn path_of<T: Serialize + ?Sized>(value: &T) -> Option<String> {
        check_finite(value).err().map(|found| found.path)
    }

    #[test]
    fn finite_values_pass() {
        assert!(check_finite(&reading(Some(1.5), vec![None, Some(-0.0)])).is_ok());
        assert!(check_finite(&reading(None, vec![])).is_ok());
        assert!(check_finite(&Shape::Point).is_ok());
        assert!(check_finite(&(f64::MAX, f32::MIN_POSITIVE, "text", ())).is_ok());
        assert!(check_finite(&serde_json::json!({ "a": [1.5, null] })).is_ok());
    }

    #[test]
    fn a_top_level_non_finite_float_is_found() {
        let found = check_finite(&f64::NAN).unwrap_err();
        assert_eq!(found.path, "");
        assert!(found.value.is_nan());
        assert_eq!(
            check_finite(&f32::INFINITY).unwrap_err().value,
            f64::INFINITY
        );
        assert_eq!(
            check_finite(&f64::NEG_INFINITY).unwrap_err().value,
            f64::NEG_INFINITY
        );
    }

    #[test]
    fn nested_non_finite_floats_are_found_with_their_json_pointer() {
        assert_eq!(path_of(&Some(f64::NAN)).as_deref(), Some(""));
        assert_eq!(
            path_of(&reading(Some(f64::INFINITY), vec![])).as_deref(),
            Some("/value")
        );
        assert_eq!(
            path_of(&reading(None, vec![Some(1.0), None, Some(f32::NAN)])).as_deref(),
            Some("/history/2")
        );
        assert_eq!(
            path_of(&vec![vec![1.0], vec![2.0, f64::NEG_INFINITY]]).as_deref(),
            Some("/1/1")
        );
        let mut map = BTreeMap::new();
        map.insert("a/b", vec![0.0, f64::NAN]);
        assert_eq!(path_of(&map).as_deref(), Some("/a~1b/1"));
        let mut numbered = HashMap::new();
        numbered.insert(7_u32, Some(f64::INFINITY));
        assert_eq!(path_of(&numbered).as_deref(), Some("/7"));
        assert_eq!(
            path_of(&Shape::Circle(f64::NAN)).as_deref(),
            Some("/Circle")
        );
        assert_eq!(
            path_of(&Shape::Pair(1.0, f64::NAN)).as_deref(),
            Some("/Pair/1")
        );
        assert_eq!(
            path_of(&Shape::Rect {
                w: 1.0,
                h: f64::INFINITY
            })
            .as_deref(),
            Some("/Rect/h")
        );
        assert_eq!(path_of(&(1.0, (2.0, f64::NAN))).as_deref(), Some("/1/1"));
    }

    /// A map key that serializes as the float with these bits.
    #[derive(PartialEq, Eq, Hash)]
    struct FloatKey(u64);

    impl Serialize for FloatKey {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_f64(f64::from_bits(self.0))
        }
    }

    #[test]
    fn a_non_finite_map_key_is_found() {
        let mut map = HashMap::new();
        map.insert(FloatKey(f64::NAN.to_bits()), 1);
        assert!(check_finite(&map).is_err());
        let mut fine = HashMap::new();
        fine.insert(FloatKey(1.5_f64.to_bits()), 1);
        assert!(check_finite(&fine).is_ok());
    }

    #[test]
    fn a_failing_serialize_is_left_to_the_serializer() {
        struct Failing;
        impl Serialize for Failing {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no"))
            }
        }
        assert!(check_finite(&Failing).is_ok());
        assert!(
            check_finite(&(Failing, f64::NAN)).is_ok(),
            "stops at the failure"
        );
    }

    /// Stored outputs are JSON text: every finite float must read back bit for bit, or a
    /// replay would see another value than the first execution (`serde_json` needs its
    /// `float_roundtrip` feature for that).
    #[test]
    fn finite_floats_read_back_from_json_text_bit_for_bit() {
        let mut bits: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut checked = 0;
        while checked < 100_000 {
            bits ^= bits << 13;
            bits ^= bits >> 7;
            bits ^= bits << 17;
            let value = f64::from_bits(bits);
            if !value.is_finite() {
                continue;
            }
            checked += 1;
            let text = serde_json::to_string(&value).unwrap();
            let back: f64 = serde_json::from_str(&text).unwrap();
            let document: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back.to_bits(), value.to_bits(), "{value:e} as {text}");
            assert_eq!(document.as_f64().map(f64::to_bits), Some(value.to_bits()));
        }
    }

    #[test]
    fn the_message_names_the_path_and_the_value() {
        let found = check_finite(&reading(Some(f64::NAN), vec![])).unwrap_err();
        assert_eq!(
            found.to_string(),
            "/value is NaN, which JSON cannot hold (it would be stored as null and read back \
             differently)"
        );
        assert!(
            check_finite(&f64::INFINITY)
                .unwrap_err()
                .to_string()
                .starts_with("the value is inf")
        );
    }
}
