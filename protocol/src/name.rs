//! Identifiers that mean something on the wire: script types, groups, instances, job ids,
//! priorities, consumer names. Each is checked once, at construction, so a key built from one
//! can never contain a separator or an empty segment.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

const NAME_MAX: usize = 64;
const JOB_ID_MAX: usize = 128;

fn check(what: &'static str, value: &str, max: usize, extra: &[char]) -> Result<(), Error> {
    let reason = if value.is_empty() {
        Some("it is empty".to_string())
    } else if value.len() > max {
        Some(format!(
            "it is {} characters long, the limit is {max}",
            value.len()
        ))
    } else {
        value
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || extra.contains(c)))
            .map(|c| format!("it contains {c:?}"))
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidName {
            what,
            value: value.to_string(),
            reason: format!(
                "{reason}; use 1-{max} characters of A-Z a-z 0-9 _ -{}",
                extra.iter().map(|c| format!(" {c}")).collect::<String>()
            ),
        }),
    }
}

macro_rules! name_type {
    ($(#[$doc:meta])* $ty:ident, $what:literal, $max:expr, $extra:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $ty(String);

        impl $ty {
            /// Checks `value` and wraps it; the error says what is wrong and what is allowed.
            pub fn new(value: impl Into<String>) -> Result<Self, Error> {
                let value = value.into();
                check($what, &value, $max, $extra)?;
                Ok(Self(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $ty {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $ty {
            type Error = Error;
            fn try_from(s: &str) -> Result<Self, Error> {
                Self::new(s)
            }
        }
    };
}

name_type!(
    /// A script type (`osis`, `sal`, `rhai`, …): the default dispatch target.
    ScriptType, "script type", NAME_MAX, &[]
);
name_type!(
    /// A group of workers sharing a queue within a script type.
    GroupName, "group", NAME_MAX, &[]
);
name_type!(
    /// One worker instance within a group, for targeted dispatch.
    InstanceName, "instance", NAME_MAX, &[]
);
name_type!(
    /// A namespace: the first segment of every key (the hash tag in cluster mode).
    Namespace, "namespace", NAME_MAX, &[]
);
name_type!(
    /// A job id: a UUID by default; callers may choose their own (dots allowed).
    JobId, "job id", JOB_ID_MAX, &['.']
);

name_type!(
    /// A batch's name (`Client::batch`): the jobs submitted under it call back once all ended.
    BatchName, "batch name", NAME_MAX, &[]
);

impl JobId {
    /// A fresh random (v4 UUID) id.
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }
}

impl GroupName {
    /// The group a worker or job belongs to when none is named (seed 000).
    pub fn default_group() -> Self {
        Self("default".to_string())
    }
}

/// A priority level: 0 is the highest, 9 the lowest; [`Priority::DEFAULT`] (5) is the level of
/// the stream without a `:prio:` suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Priority(u8);

impl Priority {
    pub const HIGHEST: Priority = Priority(0);
    pub const LOWEST: Priority = Priority(9);
    pub const DEFAULT: Priority = Priority(5);

    pub fn new(level: u8) -> Result<Self, Error> {
        if level <= Self::LOWEST.0 {
            Ok(Self(level))
        } else {
            Err(Error::InvalidInput(format!(
                "priority {level} is out of range: use 0 (highest) to 9 (lowest), 5 is the default"
            )))
        }
    }

    pub fn level(self) -> u8 {
        self.0
    }

    /// Every level, highest first.
    pub fn all() -> impl Iterator<Item = Priority> {
        (Self::HIGHEST.0..=Self::LOWEST.0).map(Priority)
    }
}

impl Default for Priority {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a job is dispatched: a script type, optionally narrowed to a group and one instance.
/// An instance always lives in a group (the `default` group when none is named).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub script_type: ScriptType,
    pub group: Option<GroupName>,
    pub instance: Option<InstanceName>,
}

impl Target {
    pub fn new(
        script_type: ScriptType,
        group: Option<GroupName>,
        instance: Option<InstanceName>,
    ) -> Self {
        let group = match (&group, &instance) {
            (None, Some(_)) => Some(GroupName::default_group()),
            _ => group,
        };
        Self {
            script_type,
            group,
            instance,
        }
    }

    pub fn of_type(script_type: ScriptType) -> Self {
        Self {
            script_type,
            group: None,
            instance: None,
        }
    }

    /// The queue's name without a priority: `<type>[/<group>[/<instance>]]`.
    pub fn name(&self) -> String {
        let mut n = self.script_type.to_string();
        if let Some(g) = &self.group {
            n.push('/');
            n.push_str(g.as_str());
            if let Some(i) = &self.instance {
                n.push('/');
                n.push_str(i.as_str());
            }
        }
        n
    }

    /// A queue as `Keyspace::queue_name` writes it, `<type>[/<group>[/<instance>]]` with an
    /// optional ` prio <n>`: its target and priority level (5 when none is given).
    pub fn parse_queue(name: &str) -> crate::error::Result<(Target, Priority)> {
        let (path, prio) = match name.trim().split_once(" prio ") {
            Some((path, p)) => {
                let level = p.trim().parse::<u8>().map_err(|_| {
                    Error::InvalidInput(format!(
                        "queue {name:?}: priority {p:?} is not a level 0 to 9"
                    ))
                })?;
                (path, Priority::new(level)?)
            }
            None => (name.trim(), Priority::DEFAULT),
        };
        let mut parts = path.split('/');
        let script_type = ScriptType::new(parts.next().unwrap_or_default())?;
        let group = parts.next().map(GroupName::new).transpose()?;
        let instance = parts.next().map(InstanceName::new).transpose()?;
        if parts.next().is_some() {
            return Err(Error::InvalidInput(format!(
                "queue {name:?} has more than type/group/instance"
            )));
        }
        Ok((Target::new(script_type, group, instance), prio))
    }
}

/// A worker process's name in the consumer groups: `<group>:<instance>:<session>`. The session
/// part is new for every process, so a restarted worker never inherits a dead one's deliveries
/// and presence-driven recovery can tell them apart.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConsumerName {
    pub group: GroupName,
    pub instance: InstanceName,
    pub session: String,
}

impl ConsumerName {
    pub fn new(group: GroupName, instance: InstanceName) -> Self {
        let session = format!("{:08x}", rand::random::<u32>());
        Self {
            group,
            instance,
            session,
        }
    }

    /// Parses the form written into a job's `worker_id`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let mut parts = s.split(':');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(g), Some(i), Some(session), None) if !session.is_empty() => Ok(Self {
                group: GroupName::new(g)?,
                instance: InstanceName::new(i)?,
                session: session.to_string(),
            }),
            _ => Err(Error::InvalidInput(format!(
                "consumer name {s:?} is not of the form <group>:<instance>:<session>"
            ))),
        }
    }
}

impl fmt::Display for ConsumerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.group, self.instance, self.session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_is_rejected_when_it_has_a_separator_or_is_empty_or_long() {
        assert!(ScriptType::new("osis").is_ok());
        assert!(ScriptType::new("a-b_C9").is_ok());
        for bad in ["", "a:b", "a b", "a*", "ü", &"x".repeat(65)] {
            let err = ScriptType::new(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidName { .. }), "{bad:?}");
        }
        let msg = GroupName::new("a:b").unwrap_err().to_string();
        assert!(msg.contains("group") && msg.contains("':'"), "{msg}");
    }

    #[test]
    fn job_id_allows_uuid_and_dots_but_no_colon() {
        assert!(JobId::new(JobId::random().as_str()).is_ok());
        assert!(JobId::new("report.2026-11-21").is_ok());
        assert!(JobId::new("a:b").is_err());
    }

    #[test]
    fn priority_is_rejected_when_out_of_range() {
        assert_eq!(Priority::new(0).unwrap(), Priority::HIGHEST);
        assert!(Priority::new(10).is_err());
        assert_eq!(Priority::all().count(), 10);
    }

    #[test]
    fn instance_without_group_lands_in_default_group() {
        let t = Target::new(
            ScriptType::new("osis").unwrap(),
            None,
            Some(InstanceName::new("1").unwrap()),
        );
        assert_eq!(t.group.unwrap().as_str(), "default");
    }

    #[test]
    fn consumer_name_round_trips() {
        let c = ConsumerName::new(
            GroupName::new("io").unwrap(),
            InstanceName::new("3").unwrap(),
        );
        let parsed = ConsumerName::parse(&c.to_string()).unwrap();
        assert_eq!(parsed, c);
        assert!(ConsumerName::parse("io:3").is_err());
    }
}
