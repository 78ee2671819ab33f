//! Fuzzed records (issue 28): a job hash is read from Redis, where anyone may have edited it by
//! hand, so any fields with any values decode to a job or to an error that names the key and
//! the field; never a panic. Values near the valid forms (numbers, timestamps, JSON) are mixed
//! in so the generated records reach past the first check.

use proptest::prelude::*;

use super::fields::F;
use super::Job;
use crate::reply;

/// The job key the fuzzed records are read from, built by the keys module like every key.
fn key() -> String {
    crate::keys::Keyspace::new(&crate::name::Namespace::new("hero").expect("a valid namespace"))
        .job(&crate::name::JobId::new("fuzz-1").expect("a valid id"))
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0..F::COUNT).prop_map(|i| F::ALL[i].name().to_string()),
        1 => "[a-z_\\-]{0,12}",
    ]
}

fn field_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        any::<i64>().prop_map(|n| n.to_string()),
        "[0-9]{0,25}",
        "20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,3})?Z?",
        "\\{\"[a-z]{0,4}\":\"[a-z]{0,4}\"\\}",
        "\\[(\"[a-z]{0,4}\",?){0,3}\\]",
        Just("waiting".to_string()),
        Just("finished".to_string()),
        Just(String::new()),
    ]
}

proptest! {
    #[test]
    fn any_record_decodes_or_names_its_bad_field(
        fields in proptest::collection::vec((field_name(), field_value()), 0..24),
    ) {
        match Job::from_fields(&key(), fields) {
            Ok(job) => prop_assert!(!job.id.as_str().is_empty()),
            Err(e) => {
                prop_assert_eq!(&e.key, &key());
                prop_assert!(!e.field.is_empty() && !e.reason.is_empty(), "{:?}", e);
            }
        }
    }

    #[test]
    fn any_reply_read_as_a_record_is_a_record_or_an_error(
        items in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..40).prop_map(redis::Value::BulkString),
                any::<i64>().prop_map(redis::Value::Int),
                Just(redis::Value::Nil),
            ],
            0..20,
        ),
    ) {
        if let Ok(record) = reply::record(redis::Value::Array(items)) {
            let _ = Job::from_record(&key(), record);
        }
    }
}
