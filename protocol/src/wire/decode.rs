//! The lane's RESP2 decoder: resumable, so a reply split over many reads is decoded once, and
//! exact to redis-rs's own (its tests compare the two on every RESP2 type).

use redis::Value;

/// A RESP2 decoder that picks up where the last read ended: arrays under construction stay on
/// a stack, so a reply split over many reads is decoded once, not again from its start.
#[derive(Default)]
pub(crate) struct Decoder {
    /// Open arrays, outermost first: how many items each still needs, and those it has.
    open: Vec<(usize, Vec<Value>)>,
}

/// One item of the stream: a complete value, or the header of an array of this many items.
enum Item {
    Value(Value),
    Array(usize),
}

impl Decoder {
    /// The next complete reply in `buf[*at..]`, advancing `at` past what it used; None when
    /// more bytes are needed.
    pub(crate) fn next(&mut self, buf: &[u8], at: &mut usize) -> Result<Option<Value>, String> {
        loop {
            let Some((item, used)) = item(&buf[*at..])? else {
                return Ok(None);
            };
            *at += used;
            let mut v = match item {
                Item::Value(v) => v,
                Item::Array(0) => Value::Array(Vec::new()),
                Item::Array(n) => {
                    // a length that came over the wire: reserve what a reply could hold
                    self.open.push((n, Vec::with_capacity(n.min(4096))));
                    continue;
                }
            };
            // place the value in the innermost open array, closing every array it completes
            loop {
                let Some((left, items)) = self.open.last_mut() else {
                    return Ok(Some(v));
                };
                items.push(v);
                *left -= 1;
                if *left > 0 {
                    break;
                }
                match self.open.pop() {
                    Some((_, items)) => v = Value::Array(items),
                    None => return Err("decoder stack out of step".into()),
                }
            }
        }
    }
}

/// The line at the start of `b`, without its CRLF, and the length with it.
fn line(b: &[u8]) -> Option<(&[u8], usize)> {
    let end = memchr_crlf(b)?;
    Some((&b[..end], end + 2))
}

fn memchr_crlf(b: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = b[from..].iter().position(|&c| c == b'\r') {
        let i = from + i;
        if i + 1 >= b.len() {
            return None;
        }
        if b[i + 1] == b'\n' {
            return Some(i);
        }
        from = i + 1;
    }
    None
}

/// A RESP length or integer, read by hand: it is read several times per job.
fn number(digits: &[u8]) -> Result<i64, String> {
    let bad = || {
        format!(
            "Redis sent {:?} where a number belongs",
            String::from_utf8_lossy(digits)
        )
    };
    let (negative, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() || digits.len() > 19 {
        return Err(bad());
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return Err(bad());
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(i64::from(d - b'0')))
            .ok_or_else(bad)?;
    }
    Ok(if negative { -n } else { n })
}

/// One item at the start of `b` and the bytes it took, or None when `b` ends inside it.
fn item(b: &[u8]) -> Result<Option<(Item, usize)>, String> {
    let Some(&kind) = b.first() else {
        return Ok(None);
    };
    let Some((rest, used)) = line(&b[1..]).map(|(l, n)| (l, n + 1)) else {
        return Ok(None);
    };
    let item = match kind {
        b'+' => Item::Value(if rest == b"OK" {
            Value::Okay
        } else {
            Value::SimpleString(String::from_utf8_lossy(rest).into_owned())
        }),
        // errors are rare: redis-rs builds its own error value from the line
        b'-' => Item::Value(redis::parse_redis_value(&b[..used]).map_err(|e| e.to_string())?),
        b':' => Item::Value(Value::Int(number(rest)?)),
        b'$' => {
            let n = number(rest)?;
            if n < 0 {
                Item::Value(Value::Nil)
            } else {
                let n = n as usize;
                let end = used + n;
                if b.len() < end + 2 {
                    return Ok(None);
                }
                if &b[end..end + 2] != b"\r\n" {
                    return Err("Redis sent a bulk string longer than it said".into());
                }
                return Ok(Some((
                    Item::Value(Value::BulkString(b[used..end].to_vec())),
                    end + 2,
                )));
            }
        }
        b'*' => {
            let n = number(rest)?;
            if n < 0 {
                Item::Value(Value::Nil)
            } else {
                Item::Array(n as usize)
            }
        }
        other => {
            return Err(format!(
                "Redis sent a reply of type {:?}, which RESP2 does not have",
                other as char
            ))
        }
    };
    Ok(Some((item, used)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8]) -> Vec<Value> {
        let mut d = Decoder::default();
        let mut at = 0;
        let mut out = Vec::new();
        while let Some(v) = d.next(bytes, &mut at).unwrap() {
            out.push(v);
        }
        assert_eq!(at, bytes.len(), "every byte used");
        out
    }

    #[test]
    fn decodes_every_resp2_type_as_redis_rs_does() {
        let wire: &[u8] = b"+OK\r\n+QUEUED\r\n:-42\r\n$5\r\nhe\r\no\r\n$-1\r\n*-1\r\n*0\r\n*3\r\n:1\r\n*2\r\n$1\r\na\r\n$0\r\n\r\n$1\r\nz\r\n-ERR Function not found\r\n";
        let ours = all(wire);
        let mut theirs = Vec::new();
        let mut parser = redis::Parser::new();
        let mut rest = wire;
        // redis-rs decodes one value per call: feed it the same values one by one
        for chunk in [
            &b"+OK\r\n"[..],
            b"+QUEUED\r\n",
            b":-42\r\n",
            b"$5\r\nhe\r\no\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n$0\r\n\r\n$1\r\nz\r\n",
            b"-ERR Function not found\r\n",
        ] {
            theirs.push(parser.parse_value(chunk).unwrap());
            rest = &rest[chunk.len()..];
        }
        assert!(rest.is_empty());
        assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
        let err = ours[8].clone().extract_error().unwrap_err();
        assert!(crate::function::is_missing(&err), "{err}");
    }

    #[test]
    fn a_reply_split_anywhere_decodes_the_same() {
        let wire: &[u8] = b"*2\r\n*3\r\n$3\r\nabc\r\n:7\r\n$-1\r\n$4\r\nw\r\nx\r\n+OK\r\n";
        let whole = all(wire);
        for cut in 0..wire.len() {
            let mut d = Decoder::default();
            let mut at = 0;
            let mut out = Vec::new();
            let mut buf = wire[..cut].to_vec();
            while let Some(v) = d.next(&buf, &mut at).unwrap() {
                out.push(v);
            }
            buf.extend_from_slice(&wire[cut..]);
            while let Some(v) = d.next(&buf, &mut at).unwrap() {
                out.push(v);
            }
            assert_eq!(out, whole, "cut at {cut}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut at = 0;
        assert!(Decoder::default().next(b"?what\r\n", &mut at).is_err());
        let mut at = 0;
        assert!(Decoder::default().next(b":12x\r\n", &mut at).is_err());
        let mut at = 0;
        assert!(Decoder::default().next(b"$2\r\nabcd\r\n", &mut at).is_err());
        let mut at = 0;
        assert!(Decoder::default()
            .next(b":99999999999999999999\r\n", &mut at)
            .is_err());
        let mut at = 0;
        assert!(Decoder::default().next(b":-\r\n", &mut at).is_err());
    }
}

/// Fuzzed input (issue 28): the decoder reads bytes off the network, so any bytes, split
/// anywhere, end in a value, a typed error or a wait for more; never a panic or a loop.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use redis::Value;

    use super::Decoder;

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<i64>().prop_map(Value::Int),
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(Value::BulkString),
            Just(Value::Nil),
            "[a-zA-Z0-9 ]{0,20}"
                .prop_filter("OK decodes as Okay", |s| s != "OK")
                .prop_map(Value::SimpleString),
            Just(Value::Okay),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            proptest::collection::vec(inner, 0..8).prop_map(Value::Array)
        })
    }

    fn encode(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            Value::BulkString(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Value::Nil => out.extend_from_slice(b"$-1\r\n"),
            Value::SimpleString(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            Value::Okay => out.extend_from_slice(b"+OK\r\n"),
            Value::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for i in items {
                    encode(i, out);
                }
            }
            other => panic!("not generated: {other:?}"),
        }
    }

    /// Decodes `bytes` given in two reads split at `cut`: the values, and an error if one came.
    fn decode_split(bytes: &[u8], cut: usize) -> (Vec<Value>, Option<String>, usize) {
        let mut d = Decoder::default();
        let mut at = 0;
        let mut out = Vec::new();
        let mut buf = bytes[..cut].to_vec();
        for round in 0..2 {
            if round == 1 {
                buf.extend_from_slice(&bytes[cut..]);
            }
            // each value takes at least one byte: more rounds than bytes is a loop
            for _ in 0..=buf.len() {
                match d.next(&buf, &mut at) {
                    Ok(Some(v)) => out.push(v),
                    Ok(None) => break,
                    Err(e) => return (out, Some(e), at),
                }
            }
        }
        (out, None, at)
    }

    proptest! {
        #[test]
        fn any_bytes_split_anywhere_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
            cut in any::<proptest::sample::Index>(),
        ) {
            let cut = cut.index(bytes.len() + 1);
            let (_, err, at) = decode_split(&bytes, cut);
            prop_assert!(at <= bytes.len());
            if let Some(e) = err {
                prop_assert!(!e.is_empty());
            }
        }

        #[test]
        fn any_reply_split_anywhere_decodes_whole(
            values in proptest::collection::vec(value(), 1..4),
            cut in any::<proptest::sample::Index>(),
        ) {
            let mut bytes = Vec::new();
            for v in &values {
                encode(v, &mut bytes);
            }
            let cut = cut.index(bytes.len() + 1);
            let (got, err, at) = decode_split(&bytes, cut);
            prop_assert_eq!(err, None);
            prop_assert_eq!(at, bytes.len());
            prop_assert_eq!(got, values);
        }

        #[test]
        fn a_truncated_reply_waits_for_the_rest(
            v in value(),
            cut in any::<proptest::sample::Index>(),
        ) {
            let mut bytes = Vec::new();
            encode(&v, &mut bytes);
            let cut = cut.index(bytes.len());
            let mut at = 0;
            prop_assert_eq!(Decoder::default().next(&bytes[..cut], &mut at), Ok(None));
        }

        #[test]
        fn a_corrupted_reply_is_a_value_or_an_error(
            v in value(),
            at in any::<proptest::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut bytes = Vec::new();
            encode(&v, &mut bytes);
            let i = at.index(bytes.len());
            bytes[i] = byte;
            let n = bytes.len();
            let (_, _, used) = decode_split(&bytes, n);
            prop_assert!(used <= n);
        }
    }
}
