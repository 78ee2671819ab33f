//! A job's output as a value (protocol 33): the one reading rule every language follows, and the
//! JSON an operator sees of it. A handler that returns a value (not plain text) leaves its
//! MessagePack bytes in the record's `value`, beside the `output` text (its JSON) that readers
//! older than 33 show; a reader takes `value` when the record has one and the `output` text
//! otherwise (a plain-text result, a foreign or older worker's). MessagePack, as the payload
//! travels: a timestamp stays a timestamp, bytes stay bytes, nil stays nil.

use serde::de::value::{Error as DeError, StrDeserializer, UnitDeserializer};
use serde::de::{DeserializeOwned, IntoDeserializer};

/// `T` from a record's `value` bytes when present, else from its `output` text (a `String`, or
/// anything serde reads from a string), else from nothing (an `Option` is `None`). The error
/// says which of the two did not decode and as what.
pub fn decode<T: DeserializeOwned>(
    value: Option<&[u8]>,
    output: Option<&str>,
) -> Result<T, String> {
    let name = std::any::type_name::<T>();
    match (value, output) {
        (Some(bytes), _) => rmp_serde::from_slice(bytes).map_err(|e| {
            format!(
                "its value ({} MessagePack bytes) does not decode as {name}: {e}",
                bytes.len()
            )
        }),
        (None, Some(text)) => {
            let de: StrDeserializer<'_, DeError> = text.into_deserializer();
            T::deserialize(de).map_err(|e| {
                format!(
                    "it returned text, not a value, and the text does not decode as {name}: {e}"
                )
            })
        }
        (None, None) => {
            let de: UnitDeserializer<DeError> = ().into_deserializer();
            T::deserialize(de).map_err(|e| format!("it has no output yet ({name} wanted): {e}"))
        }
    }
}

/// The JSON an operator sees of a value's MessagePack bytes (the CLI, the HTTP API, the
/// dashboard): a timestamp as ISO 8601 text, bytes as `{"base64": …}`, a map key that is not
/// text as its JSON. `None` for bytes that are not MessagePack.
pub fn to_json(bytes: &[u8]) -> Option<serde_json::Value> {
    let v = rmpv::decode::read_value(&mut &bytes[..]).ok()?;
    Some(json_of(v))
}

fn json_of(v: rmpv::Value) -> serde_json::Value {
    use base64::Engine;
    use rmpv::Value as M;
    use serde_json::Value as J;
    match v {
        M::Nil => J::Null,
        M::Boolean(b) => J::Bool(b),
        M::Integer(i) => i
            .as_i64()
            .map(J::from)
            .or_else(|| i.as_u64().map(J::from))
            .unwrap_or(J::Null),
        M::F32(f) => serde_json::Number::from_f64(f as f64).map_or(J::Null, J::Number),
        M::F64(f) => serde_json::Number::from_f64(f).map_or(J::Null, J::Number),
        M::String(s) => match s.into_str() {
            Some(s) => J::String(s),
            None => J::Null,
        },
        M::Binary(b) => {
            serde_json::json!({ "base64": base64::engine::general_purpose::STANDARD.encode(b) })
        }
        M::Array(a) => J::Array(a.into_iter().map(json_of).collect()),
        M::Map(m) => J::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        M::String(s) => s.into_str().unwrap_or_default(),
                        other => json_of(other).to_string(),
                    };
                    (key, json_of(v))
                })
                .collect(),
        ),
        M::Ext(-1, data) => timestamp(&data).map_or(J::Null, J::String),
        M::Ext(kind, data) => serde_json::json!({
            "ext": kind,
            "base64": base64::engine::general_purpose::STANDARD.encode(data),
        }),
    }
}

/// MessagePack's timestamp extension (type -1: 4, 8 or 12 bytes) as ISO 8601 text, to the ms.
fn timestamp(data: &[u8]) -> Option<String> {
    let (secs, nanos): (i64, u32) = match data.len() {
        4 => (u32::from_be_bytes(data.try_into().ok()?) as i64, 0),
        8 => {
            let x = u64::from_be_bytes(data.try_into().ok()?);
            ((x & 0x3_ffff_ffff) as i64, (x >> 34) as u32)
        }
        12 => (
            i64::from_be_bytes(data[4..12].try_into().ok()?),
            u32::from_be_bytes(data[..4].try_into().ok()?),
        ),
        _ => return None,
    };
    let ms = secs
        .checked_mul(1000)?
        .checked_add((nanos / 1_000_000) as i64)?;
    Some(crate::clock::iso(u64::try_from(ms).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_wins_over_the_text_and_text_reads_as_a_string() {
        let bytes = rmp_serde::to_vec_named(&serde_json::json!({"a": 1})).unwrap();
        let v: serde_json::Value = decode(Some(&bytes), Some("{\"a\":1}")).unwrap();
        assert_eq!(v, serde_json::json!({"a": 1}));
        let s: String = decode(None, Some("{\"a\":1}")).unwrap();
        assert_eq!(s, "{\"a\":1}");
        let none: Option<u32> = decode(None, None).unwrap();
        assert_eq!(none, None);
        let nil = rmp_serde::to_vec(&()).unwrap();
        let v: Option<u32> = decode(Some(&nil), Some("")).unwrap();
        assert_eq!(v, None);
        assert!(decode::<u32>(None, Some("x"))
            .unwrap_err()
            .contains("returned text"));
    }

    #[test]
    fn json_shows_timestamps_bytes_and_maps() {
        // {"at": timestamp 2026-01-01T00:00:00Z (ext -1, 4 bytes), "b": bin [1,2], 1: nil}
        let mut buf = vec![0x83, 0xa2, b'a', b't', 0xd6, 0xff];
        buf.extend(1_767_225_600u32.to_be_bytes());
        buf.extend([0xa1, b'b', 0xc4, 2, 1, 2, 0x01, 0xc0]);
        let j = to_json(&buf).unwrap();
        assert_eq!(j["at"], "2026-01-01T00:00:00.000Z");
        assert_eq!(j["b"]["base64"], "AQI=");
        assert_eq!(j["1"], serde_json::Value::Null);
    }
}
