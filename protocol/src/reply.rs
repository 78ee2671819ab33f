//! Reading Redis replies: text, numbers, arrays, field/value pairs, each a typed error on a
//! value of the wrong shape ([`Error::Protocol`], made by [`unexpected`]), never a panic. These
//! are the readers of the plain commands' replies an operator's tools decode (XPENDING, XINFO,
//! SCAN, the stats hashes); each server function's own reply type lives beside its call builder
//! in `crate::function` (e.g. `function::FetchReply` in `function/fetch.rs`) and is decoded
//! there, once, and a job record is read by `Job::from_reply`.

use redis::Value;

use crate::error::{Error, Result};

/// A string (a number or OK read as text).
pub fn text(v: &Value) -> Result<String> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        Value::Okay => Ok("OK".into()),
        other => Err(Error::protocol(format!("expected a string, got {other:?}"))),
    }
}

/// An integer, or a string of one.
pub fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        other => text(other)?
            .parse()
            .map_err(|_| Error::protocol(format!("expected an integer, got {other:?}"))),
    }
}

/// The items of an array (none for a nil).
pub fn array(v: &Value) -> Result<&[Value]> {
    match v {
        Value::Array(items) => Ok(items),
        Value::Nil => Ok(&[]),
        other => Err(Error::protocol(format!("expected an array, got {other:?}"))),
    }
}

/// Field/value pairs of a flat HGETALL-style array, taking the strings out of the reply rather
/// than copying them (a worker reads a record per job).
pub fn pairs(v: Value) -> Result<Vec<(String, String)>> {
    let items = match v {
        Value::Array(items) => items,
        Value::Nil => Vec::new(),
        other => return Err(Error::protocol(format!("expected an array, got {other:?}"))),
    };
    if items.len() % 2 != 0 {
        return Err(Error::protocol("odd number of items in a field/value list"));
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut items = items.into_iter();
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        out.push((owned_text(k)?, owned_text(v)?));
    }
    Ok(out)
}

/// A job hash's text fields, and its binary ones (`payload`, `value`, `value:<id>`: MessagePack
/// need not be UTF-8) as bytes.
pub(crate) type Record = (Vec<(String, String)>, Vec<(String, Vec<u8>)>);

/// Whether a record field holds MessagePack bytes rather than text.
fn is_binary(field: &str) -> bool {
    field == "payload" || field == "value" || field.starts_with("value:")
}

/// A job hash as HGETALL answers it, for [`crate::Job::from_record`]: the field/value pairs as
/// text, except the binary fields ([`Record`]), whose bytes are taken as they are.
pub(crate) fn record(v: Value) -> Result<Record> {
    let items = match v {
        Value::Array(items) => items,
        Value::Nil => Vec::new(),
        other => return Err(Error::protocol(format!("expected an array, got {other:?}"))),
    };
    if items.len() % 2 != 0 {
        return Err(Error::protocol("odd number of items in a field/value list"));
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut binary = Vec::new();
    let mut items = items.into_iter();
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        let k = owned_text(k)?;
        if is_binary(&k) {
            if let Value::BulkString(b) = v {
                binary.push((k, b));
                continue;
            }
        }
        out.push((k, owned_text(v)?));
    }
    Ok((out, binary))
}

/// [`text`] of a reply the caller owns: a bulk string becomes the String without a copy.
fn owned_text(v: Value) -> Result<String> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8(b)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())),
        other => text(&other),
    }
}

/// The error for a reply that is not what the protocol says it is (a Redis or a library of
/// another version answered): every decoder of hero's replies, in any crate, reports it so.
pub fn unexpected(what: impl Into<String>) -> Error {
    Error::protocol(what)
}
