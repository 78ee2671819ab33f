//! MessagePack's timestamp extension (type -1) as a Rust value: what a Node `Date` or a Python
//! `datetime` in a job's payload is, read with `Job::payload` into a struct with a
//! [`Timestamp`] field, and written back the same way, so a Rust handler and producer speak the
//! payloads of the other languages (their `Buffer` / `bytes` are `bin`, a [`Bin`] field; their `Map` / `dict` a map; their `BigInt` / `int` an `i64` or
//! `u64`). rmp-serde carries an extension as the newtype struct `_ExtStruct((i8, bytes))`.

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A point in time as MessagePack's timestamp extension holds it: seconds since the epoch (before
/// it, negative) and nanoseconds within the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

impl Timestamp {
    /// Milliseconds since the epoch (a JavaScript `Date`'s number).
    pub fn unix_ms(&self) -> i64 {
        self.secs * 1000 + i64::from(self.nanos / 1_000_000)
    }

    pub fn from_unix_ms(ms: i64) -> Timestamp {
        Timestamp {
            secs: ms.div_euclid(1000),
            nanos: (ms.rem_euclid(1000) as u32) * 1_000_000,
        }
    }

    /// The extension's data: 32-bit, 64-bit or 96-bit form, the shortest that holds it.
    fn to_bytes(self) -> Vec<u8> {
        if self.nanos == 0 && (0..1 << 32).contains(&self.secs) {
            (self.secs as u32).to_be_bytes().to_vec()
        } else if (0..1 << 34).contains(&self.secs) {
            ((u64::from(self.nanos) << 34) | self.secs as u64)
                .to_be_bytes()
                .to_vec()
        } else {
            let mut b = self.nanos.to_be_bytes().to_vec();
            b.extend_from_slice(&self.secs.to_be_bytes());
            b
        }
    }

    fn from_bytes(b: &[u8]) -> Result<Timestamp, String> {
        match b.len() {
            4 => Ok(Timestamp {
                secs: i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                nanos: 0,
            }),
            8 => {
                let v = u64::from_be_bytes(b.try_into().map_err(|_| "8 bytes")?);
                Ok(Timestamp {
                    secs: (v & 0x3_ffff_ffff) as i64,
                    nanos: (v >> 34) as u32,
                })
            }
            12 => Ok(Timestamp {
                nanos: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                secs: i64::from_be_bytes(b[4..12].try_into().map_err(|_| "12 bytes")?),
            }),
            n => Err(format!(
                "a timestamp of {n} bytes (MessagePack's are 4, 8 or 12)"
            )),
        }
    }
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Timestamp {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp {
                secs: d.as_secs() as i64,
                nanos: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                let mut secs = -(d.as_secs() as i64);
                let mut nanos = d.subsec_nanos();
                if nanos > 0 {
                    secs -= 1;
                    nanos = 1_000_000_000 - nanos;
                }
                Timestamp { secs, nanos }
            }
        }
    }
}

impl From<Timestamp> for SystemTime {
    fn from(t: Timestamp) -> SystemTime {
        if t.secs >= 0 {
            UNIX_EPOCH + Duration::new(t.secs as u64, t.nanos)
        } else {
            UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs())
                + Duration::from_nanos(u64::from(t.nanos))
        }
    }
}

/// Bytes read and written as MessagePack `bin` (a Node `Buffer`, a Python `bytes`); a plain
/// `Vec<u8>` field would be an array of numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bin(pub Vec<u8>);

impl Serialize for Bin {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bin {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bin, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Bin;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Bin, E> {
                Ok(Bin(v.to_vec()))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Bin, E> {
                Ok(Bin(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Bin, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(Bin(out))
            }
        }
        d.deserialize_bytes(V)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename = "_ExtStruct")]
struct Ext((i8, Bin));

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Ext((-1, Bin(self.to_bytes()))).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let Ext((kind, Bin(bytes))) = Ext::deserialize(d)?;
        if kind != -1 {
            return Err(de::Error::custom(format!(
                "extension type {kind} is not a timestamp (-1)"
            )));
        }
        Timestamp::from_bytes(&bytes).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// What the Node package writes for `{ at: new Date("2026-11-26T10:20:30.456Z"), bytes:
    /// Buffer.from("hi"), ids: new Map([[1, "one"]]), big: 2n ** 60n + 7n }` (node/test).
    const FROM_NODE: &str = "84a26174d7ff6cb808006b0807eea56279746573c4026869a36964738101a36f6e65a3626967cf1000000000000007";

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    struct Payload {
        at: Timestamp,
        bytes: Bin,
        ids: BTreeMap<u32, String>,
        big: u64,
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn a_node_payload_reads_as_rust_types_and_writes_back_the_same_bytes() {
        let bytes = hex(FROM_NODE);
        let p: Payload = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(p.at.unix_ms(), 1_795_688_430_456);
        assert_eq!(p.bytes, Bin(b"hi".to_vec()));
        assert_eq!(p.ids[&1], "one");
        assert_eq!(p.big, (1 << 60) + 7);
        assert_eq!(rmp_serde::to_vec_named(&p).unwrap(), bytes);
    }

    #[test]
    fn times_before_the_epoch_and_each_form_round_trip() {
        // Node's `new Date("1969-07-20T20:17:40Z")`: the 96-bit form
        let t: Timestamp = rmp_serde::from_slice(&hex("c70cff00000000ffffffffff2795e4")).unwrap();
        assert_eq!(t.unix_ms(), -14_182_940_000);
        for ms in [0, 1_000, 1_795_688_430_456, -14_182_940_000, -1] {
            let t = Timestamp::from_unix_ms(ms);
            let back: Timestamp = rmp_serde::from_slice(&rmp_serde::to_vec(&t).unwrap()).unwrap();
            assert_eq!(back.unix_ms(), ms);
            assert_eq!(Timestamp::from(SystemTime::from(t)), t);
        }
    }
}
