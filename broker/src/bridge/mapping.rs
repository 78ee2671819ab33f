//! Bridge mappings (SPEC §6): one legacy list ↔ one canonical target, with its direction,
//! dual-push switch and pickup time, parsed from `--bridge` flags or `[[bridge]]` tables of the
//! config file. Parsing only: the loops that serve a mapping are the bridge's other modules.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use hero_protocol::{GroupName, InstanceName, ScriptType, Target};
use serde::Deserialize;

/// A bad mapping in flags or the config file.
#[derive(Debug, thiserror::Error)]
pub enum BridgeConfigError {
    #[error("bridge mapping {spec:?}: {why}")]
    Mapping { spec: String, why: String },
    #[error("config file {path}: {why}")]
    File { path: String, why: String },
}

/// Which way jobs cross a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Ids legacy producers push to the list go into the canonical stream.
    Inbound,
    /// Jobs of the canonical stream go to the list's legacy actors.
    Outbound,
    Both,
}

impl Direction {
    fn parse(s: &str) -> Option<Direction> {
        match s {
            "in" | "inbound" => Some(Direction::Inbound),
            "out" | "outbound" => Some(Direction::Outbound),
            "both" => Some(Direction::Both),
            _ => None,
        }
    }

    pub fn inbound(self) -> bool {
        self != Direction::Outbound
    }

    pub fn outbound(self) -> bool {
        self != Direction::Inbound
    }
}

/// One legacy queue ↔ one canonical target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeMapping {
    /// The legacy list's full key, e.g. `hero:work_queue:w1`.
    pub legacy: String,
    pub target: Target,
    pub direction: Direction,
    /// Migration phase 1: a submit to the target is also pushed to the list, and whichever
    /// side takes it first runs it. Replaces the outbound hand-out for this mapping.
    pub dual_push: bool,
    /// A job handed to the list and not taken by a legacy actor within this time is taken back.
    pub pickup: Duration,
}

pub const DEFAULT_PICKUP: Duration = Duration::from_secs(60);

impl BridgeMapping {
    pub fn new(
        legacy: &str,
        target: Target,
        direction: Direction,
        dual_push: bool,
        pickup: Duration,
    ) -> Result<Self, BridgeConfigError> {
        let bad = |why: &str| BridgeConfigError::Mapping {
            spec: legacy.to_string(),
            why: why.to_string(),
        };
        if dual_push && !direction.outbound() {
            return Err(bad(
                "dual-push sends jobs to legacy actors: it needs direction outbound or both",
            ));
        }
        if pickup.is_zero() {
            return Err(bad("the pickup time must be more than 0"));
        }
        Ok(BridgeMapping {
            legacy: legacy.to_string(),
            target,
            direction,
            dual_push,
            pickup,
        })
    }
}

fn target_of(
    spec: &str,
    script_type: &str,
    group: Option<&str>,
    instance: Option<&str>,
) -> Result<Target, BridgeConfigError> {
    let bad = |e: hero_protocol::Error| BridgeConfigError::Mapping {
        spec: spec.to_string(),
        why: e.to_string(),
    };
    Ok(Target::new(
        ScriptType::new(script_type).map_err(bad)?,
        group.map(GroupName::new).transpose().map_err(bad)?,
        instance.map(InstanceName::new).transpose().map_err(bad)?,
    ))
}

/// The flag form: `<legacy key>=<type>[/<group>[/<instance>]][,in|out|both][,dual-push][,pickup=<secs>]`,
/// e.g. `hero:work_queue:w1=osis/io,both,dual-push`. The direction defaults to both.
impl FromStr for BridgeMapping {
    type Err = BridgeConfigError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| BridgeConfigError::Mapping {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let (legacy, rest) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected <legacy key>=<type>[/<group>[/<instance>]][,in|out|both][,dual-push][,pickup=<secs>]"))?;
        let mut parts = rest.split(',');
        let target = parts.next().unwrap_or_default();
        let mut path = target.split('/');
        let script_type = path.next().unwrap_or_default();
        let (group, instance) = (path.next(), path.next());
        if path.next().is_some() {
            return Err(bad("the target is <type>[/<group>[/<instance>]]"));
        }
        let target = target_of(spec, script_type, group, instance)?;
        let (mut direction, mut dual, mut pickup) = (Direction::Both, false, DEFAULT_PICKUP);
        for opt in parts {
            if let Some(d) = Direction::parse(opt) {
                direction = d;
            } else if opt == "dual-push" {
                dual = true;
            } else if let Some(secs) = opt.strip_prefix("pickup=") {
                pickup = Duration::from_secs(
                    secs.parse()
                        .map_err(|_| bad("pickup=<seconds> takes a whole number"))?,
                );
            } else {
                return Err(bad(&format!(
                    "unknown option {opt:?}; expected in, out, both, dual-push or pickup=<secs>"
                )));
            }
        }
        BridgeMapping::new(legacy, target, direction, dual, pickup)
    }
}

/// The parts of the TOML configuration file this module reads: the mappings and the switch,
/// in the `[broker]` table or (the older layout) at the top. The file's other keys are
/// checked by `cli::file`.
#[derive(Deserialize, Default)]
struct FileConfig {
    legacy_replies: Option<bool>,
    #[serde(default)]
    bridge: Vec<FileMapping>,
    #[serde(default)]
    broker: Option<BrokerTable>,
}

#[derive(Deserialize, Default)]
struct BrokerTable {
    legacy_replies: Option<bool>,
    #[serde(default)]
    bridge: Vec<FileMapping>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMapping {
    legacy: String,
    #[serde(rename = "type")]
    script_type: String,
    group: Option<String>,
    instance: Option<String>,
    direction: Option<String>,
    #[serde(default)]
    dual_push: bool,
    pickup_secs: Option<u64>,
}

/// Mappings and the compatibility switch from a config file:
///
/// ```toml
/// legacy_replies = true           # also answer hero:reply:<id> (default: on when mapped)
/// [[bridge]]
/// legacy = "<namespace>:work_queue:w1"
/// type = "osis"                   # group = "io", instance = "3" are optional
/// direction = "both"              # inbound | outbound | both
/// dual_push = false
/// pickup_secs = 60
/// ```
pub fn load_file(path: &Path) -> Result<(Vec<BridgeMapping>, Option<bool>), BridgeConfigError> {
    let file_err = |why: String| BridgeConfigError::File {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
    let cfg: FileConfig =
        toml::from_str(&text).map_err(|e| file_err(crate::toml_error::toml_error(&text, &e)))?;
    let mut mappings = Vec::new();
    let (mut listed, mut legacy_replies) = (cfg.bridge, cfg.legacy_replies);
    if let Some(b) = cfg.broker {
        listed.extend(b.bridge);
        legacy_replies = b.legacy_replies.or(legacy_replies);
    }
    for m in listed {
        let direction = match m.direction.as_deref() {
            None => Direction::Both,
            Some(d) => Direction::parse(d).ok_or_else(|| BridgeConfigError::Mapping {
                spec: m.legacy.clone(),
                why: format!("direction {d:?}; expected inbound, outbound or both"),
            })?,
        };
        let target = target_of(
            &m.legacy,
            &m.script_type,
            m.group.as_deref(),
            m.instance.as_deref(),
        )?;
        let pickup = m
            .pickup_secs
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_PICKUP);
        mappings.push(BridgeMapping::new(
            &m.legacy,
            target,
            direction,
            m.dual_push,
            pickup,
        )?);
    }
    Ok((mappings, legacy_replies))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hero_protocol::{Keyspace, Namespace};

    /// A legacy key of the default namespace, built by the keys module.
    fn work_queue(id: &str) -> String {
        Keyspace::new(&Namespace::new("hero").unwrap()).legacy_work_queue(id)
    }

    #[test]
    fn flag_mappings_parse_with_their_options_and_bad_ones_say_why() {
        let w1 = work_queue("w1");
        let m: BridgeMapping = format!("{w1}=osis/io/3,in,pickup=5").parse().unwrap();
        assert_eq!(m.legacy, w1);
        assert_eq!(m.target.script_type.as_str(), "osis");
        assert_eq!(m.target.group.as_ref().map(|g| g.as_str()), Some("io"));
        assert_eq!(m.target.instance.as_ref().map(|i| i.as_str()), Some("3"));
        assert_eq!(
            (m.direction, m.dual_push, m.pickup),
            (Direction::Inbound, false, Duration::from_secs(5))
        );
        let d: BridgeMapping = format!("{w1}=sal,dual-push").parse().unwrap();
        assert_eq!((d.direction, d.dual_push), (Direction::Both, true));
        for (rest, says) in [
            ("", "expected <legacy key>="),
            ("=bad type", "script type"),
            ("=osis,sideways", "unknown option"),
            ("=osis,in,dual-push", "dual-push"),
            ("=osis,pickup=soon", "whole number"),
        ] {
            let bad = format!("{w1}{rest}");
            let e = bad.parse::<BridgeMapping>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_config_file_gives_mappings_and_the_compatibility_switch() {
        let dir = std::env::temp_dir().join(format!("hero-bridge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("hero.toml");
        std::fs::write(
            &path,
            format!("legacy_replies = false\n[[bridge]]\nlegacy = \"{}\"\ntype = \"v\"\ndirection = \"outbound\"\ndual_push = true\npickup_secs = 9\n", work_queue("a7")),
        )
        .unwrap();
        let (maps, compat) = load_file(&path).unwrap();
        assert_eq!(compat, Some(false));
        assert_eq!(maps.len(), 1);
        assert_eq!(
            (maps[0].direction, maps[0].dual_push, maps[0].pickup),
            (Direction::Outbound, true, Duration::from_secs(9))
        );
        std::fs::write(
            &path,
            format!(
                "[[bridge]]\nlegacy = \"{}\"\ntype = \"v\"\ncolour = 1\n",
                work_queue("a7")
            ),
        )
        .unwrap();
        let e = load_file(&path).unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
