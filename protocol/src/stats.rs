//! The stats kept on write (SPEC §5): what the server functions count in the stats hashes
//! (`Keyspace::stats`, and per minute `Keyspace::stats_minute`), named here once, and how a
//! hash is read back into per-stream figures. The functions write them (`stats`, `tally`,
//! `histogram`, `flush_stats` in `prelude.lua`), the broker's depth sample adds the minute's
//! `waiting`, and every face (CLI, HTTP API, dashboard, `/metrics`) reads them through
//! `inspect::queues`. Reading all of them costs O(queues), never O(jobs).

use std::collections::{BTreeMap, HashMap};

/// Between a stream's key and the stat's name in a field: `<stream>|finished`.
pub const SEPARATOR: char = '|';

/// How long a minute's hash lives after its first write (the functions' `EXPIRE ... 7200`).
pub const MINUTE_TTL_SECS: u64 = 7200;

/// Counters of ended and moved jobs, per stream (also per minute: finished and failed make the
/// rates).
pub const FINISHED: &str = "finished";
/// Ended `error`, whatever the reason (dead letters and stops included).
pub const FAILED: &str = "failed";
pub const RETRIED: &str = "retried";
pub const RECOVERED: &str = "recovered";
pub const DEAD: &str = "dead";
/// Entries a fetch dropped because their job's record was gone (evicted, deleted by hand): jobs
/// lost, counted so that the audit names them after their entries are gone (since protocol 31).
pub const LOST: &str = "lost";
/// Gauge: jobs of the stream waiting in the delayed set.
pub const DELAYED: &str = "delayed";
/// Gauge: jobs of a fair stream waiting in its gate (`gate.lua`), not yet on the stream.
pub const FAIR: &str = "fair";
/// Histogram of dispatch-to-start times: `<stream>|wait|<bucket>`, `<stream>|wait|sum`.
pub const WAIT: &str = "wait";
/// Histogram of start-to-end times.
pub const RUN: &str = "run";
/// A histogram's total of samples (ms), beside its buckets.
pub const SUM: &str = "sum";
/// The per-minute field the broker's depth sample writes for each stream.
pub const WAITING_SAMPLE: &str = "waiting";

/// The field of stat `name` of `stream`.
pub fn field(stream: &str, name: &str) -> String {
    format!("{stream}{SEPARATOR}{name}")
}

/// A histogram of times: bucket b holds the times of [2^b - 1, 2^(b+1) - 1) ms.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    pub buckets: BTreeMap<u32, u64>,
    /// The samples' total, ms.
    pub sum_ms: u64,
}

impl Histogram {
    /// Adds another histogram's samples (the same queue on another shard).
    pub fn absorb(&mut self, other: &Histogram) {
        for (b, n) in &other.buckets {
            *self.buckets.entry(*b).or_default() += n;
        }
        self.sum_ms += other.sum_ms;
    }

    pub fn count(&self) -> u64 {
        self.buckets.values().sum()
    }

    /// The upper bound (ms) of bucket `b`.
    pub fn upper_ms(b: u32) -> u64 {
        (1u64 << (b + 1).min(63)) - 1
    }

    /// The time below which a share `q` (0..1) of the samples fall: the upper bound of the
    /// bucket that holds that sample. `None` without samples.
    pub fn quantile_ms(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (b, n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return Some(Self::upper_ms(*b));
            }
        }
        None
    }

    /// Adds one field of the histogram: a bucket's count, or the sum.
    fn add(&mut self, part: &str, n: u64) {
        if part == SUM {
            self.sum_ms = n;
        } else if let Ok(b) = part.parse() {
            *self.buckets.entry(b).or_default() += n;
        }
    }
}

/// Everything one stats hash holds about one stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    pub finished: u64,
    pub failed: u64,
    pub retried: u64,
    pub recovered: u64,
    pub dead: u64,
    pub lost: u64,
    /// A gauge, so it may read below 0 after a hand edit; shown as it is.
    pub delayed: i64,
    /// A fair stream's jobs in its gate (a gauge, as `delayed`): waiting, though not on the
    /// stream.
    pub gated: i64,
    pub wait: Histogram,
    pub run: Histogram,
    /// The broker's depth sample (minute hashes only).
    pub waiting: Option<u64>,
}

impl StreamStats {
    /// Jobs ended (finished or failed).
    pub fn done(&self) -> u64 {
        self.finished + self.failed
    }

    fn add(&mut self, name: &str, n: i64) {
        let count = n.max(0) as u64;
        match name {
            FINISHED => self.finished += count,
            FAILED => self.failed += count,
            RETRIED => self.retried += count,
            RECOVERED => self.recovered += count,
            DEAD => self.dead += count,
            LOST => self.lost += count,
            DELAYED => self.delayed += n,
            FAIR => self.gated += n,
            WAITING_SAMPLE => *self.waiting.get_or_insert(0) += count,
            other => match other.split_once(SEPARATOR) {
                Some((WAIT, part)) => self.wait.add(part, count),
                Some((RUN, part)) => self.run.add(part, count),
                // a stat a newer version counts: left for that version to read
                _ => {}
            },
        }
    }
}

/// A stats hash (its HGETALL as field/value pairs) by stream. Fields that are not
/// `<stream>|<stat>` or whose value is not a number (written by hand) are skipped.
pub fn by_stream(
    pairs: impl IntoIterator<Item = (String, String)>,
) -> HashMap<String, StreamStats> {
    let mut out: HashMap<String, StreamStats> = HashMap::new();
    for (field, value) in pairs {
        let Some((stream, name)) = field.split_once(SEPARATOR) else {
            continue;
        };
        let Ok(n) = value.parse::<i64>() else {
            continue;
        };
        out.entry(stream.to_string()).or_default().add(name, n);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_the_upper_bound_of_the_bucket_holding_the_rank() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile_ms(0.5), None);
        h.buckets.insert(0, 50); // < 1 ms
        h.buckets.insert(3, 49); // 7..15 ms
        h.buckets.insert(10, 1); // 1023..2047 ms
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile_ms(0.5), Some(1));
        assert_eq!(h.quantile_ms(0.99), Some(15));
        assert_eq!(h.quantile_ms(1.0), Some(2047));
    }

    #[test]
    fn a_hash_reads_back_by_stream_and_skips_what_is_not_a_stat() {
        let pairs = [
            ("s1|finished", "7"),
            ("s1|failed", "2"),
            ("s1|delayed", "-1"),
            ("s1|wait|3", "4"),
            ("s1|wait|sum", "40"),
            ("s1|run|0", "9"),
            ("s2|dead", "1"),
            ("s2|waiting", "12"),
            ("s2|newer_stat", "5"),
            ("no separator", "1"),
            ("s2|retried", "not a number"),
        ]
        .map(|(f, v)| (f.to_string(), v.to_string()));
        let by = by_stream(pairs);
        let s1 = &by["s1"];
        assert_eq!(
            (s1.finished, s1.failed, s1.done(), s1.delayed),
            (7, 2, 9, -1)
        );
        assert_eq!(s1.wait.buckets.get(&3), Some(&4));
        assert_eq!(s1.wait.sum_ms, 40);
        assert_eq!(s1.run.count(), 9);
        let s2 = &by["s2"];
        assert_eq!((s2.dead, s2.waiting, s2.retried), (1, Some(12), 0));
        assert_eq!(by.len(), 2);
        assert_eq!(field("s1", FINISHED), "s1|finished");
    }

    /// The names above are the ones the functions write: each appears quoted in the library
    /// (`sum` is the key of the Lua histogram's table, written as its field the same way).
    #[test]
    fn every_stat_name_is_one_the_functions_write() {
        let src = crate::function::library_source();
        for name in [
            FINISHED, FAILED, RETRIED, RECOVERED, DEAD, LOST, DELAYED, WAIT, RUN,
        ] {
            assert!(
                src.contains(&format!("'{name}'")),
                "no function writes the stat {name:?}"
            );
        }
    }
}
