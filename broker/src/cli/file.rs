//! The configuration file (`--config <FILE>`, `HERO_CONFIG`): TOML whose top-level keys are the
//! global flags (`redis_url`, `namespace`, `tls_ca`, …) and whose tables are commands
//! (`[broker]`, `[worker]`, `[up]`, …), each key a flag of that command by its long name
//! (`lease_ms` or `lease-ms`). The file fills in only what neither a flag nor a `HERO_*`
//! variable gave, so the precedence is flags, then environment, then file, then defaults; and
//! every value goes through the same parser as its flag. An unknown key, or a value its flag
//! refuses, is an error naming the key and the file. The broker's `[[broker.bridge]]`
//! mappings (or top-level `[[bridge]]`) are read by `bridge::load_file`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, Command, CommandFactory, FromArgMatches};

use super::Cli;

/// Keys the generic layer leaves to the bridge's own reader.
const BRIDGE_KEYS: [&str; 1] = ["bridge"];

/// Parses the command line, with the configuration file (when one is named) filling in what it
/// did not give.
pub fn parse(argv: Vec<OsString>) -> Result<Cli, clap::Error> {
    let first = Cli::command().try_get_matches_from(&argv)?;
    let Some(path) = config_path(&first) else {
        return Cli::from_arg_matches(&first);
    };
    let extra = match from_file(&path, &first) {
        Ok(e) => e,
        Err(e) => {
            return Err(Cli::command().error(clap::error::ErrorKind::InvalidValue, format!("{e:#}")))
        }
    };
    if extra.is_empty() {
        return Cli::from_arg_matches(&first);
    }
    let mut full = argv;
    // after a `--` everything is positional: the file's flags go before it
    let at = full.iter().position(|a| a == "--").unwrap_or(full.len());
    let flags: Vec<OsString> = extra.iter().flat_map(|(_, f)| f.iter().cloned()).collect();
    full.splice(at..at, flags);
    match Cli::command().try_get_matches_from(&full) {
        Ok(m) => Cli::from_arg_matches(&m),
        Err(e) => {
            let text = e.to_string();
            let key = extra
                .iter()
                .find(|(_, f)| {
                    f.first()
                        .is_some_and(|flag| text.contains(&*flag.to_string_lossy()))
                })
                .map(|(k, _)| k.clone());
            let msg = match key {
                Some(k) => format!(
                    "in {}: key `{k}`: {}",
                    path.display(),
                    text.trim_start_matches("error: ").trim()
                ),
                None => format!("in {} (or the command line): {text}", path.display()),
            };
            Err(Cli::command().error(clap::error::ErrorKind::InvalidValue, msg))
        }
    }
}

/// The file named by `--config` or `HERO_CONFIG`.
pub fn config_path(m: &ArgMatches) -> Option<PathBuf> {
    m.get_one::<PathBuf>("config").cloned()
}

/// The flags the file gives, each with the key it came from (`broker.lease_ms`).
fn from_file(path: &Path, given: &ArgMatches) -> Result<Vec<(String, Vec<OsString>)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{} is not valid TOML: {}",
            path.display(),
            crate::toml_error::toml_error(&text, &e)
        )
    })?;
    let root = Cli::command();
    let (sub_name, sub_given) = match given.subcommand() {
        Some((n, m)) => (Some(n.to_string()), Some(m)),
        None => (None, None),
    };
    let mut out = Vec::new();
    for (key, value) in &table {
        if let toml::Value::Table(inner) = value {
            let Some(cmd) = root.find_subcommand(key) else {
                bail!(
                    "{}: `[{key}]` is not a command (the tables are commands: [broker], [worker], [up], ...)",
                    path.display()
                );
            };
            for (k, v) in inner {
                if key == "broker" && (BRIDGE_KEYS.contains(&k.as_str())) {
                    continue;
                }
                let arg_id = flag_of(cmd, k).with_context(|| {
                    format!(
                        "{}: key `{key}.{k}` is not a flag of `hero {key}`",
                        path.display()
                    )
                })?;
                if sub_name.as_deref() == Some(key.as_str()) {
                    if let Some(m) = sub_given {
                        push(&mut out, &format!("{key}.{k}"), cmd, &arg_id, v, m, path)?;
                    }
                }
            }
        } else if BRIDGE_KEYS.contains(&key.as_str()) || key == "legacy_replies" {
            // the broker's older layout, read by bridge::load_file
            if !matches!(value, toml::Value::Array(_) | toml::Value::Boolean(_)) {
                bail!("{}: key `{key}` has the wrong type", path.display());
            }
        } else {
            let arg_id = flag_of(&root, key)
                .filter(|id| {
                    root.get_arguments()
                        .any(|a| a.get_id().as_str() == id && a.is_global_set())
                })
                .with_context(|| {
                    format!(
                        "{}: key `{key}` is not a global flag (a command's settings go in its table, e.g. [broker])",
                        path.display()
                    )
                })?;
            if arg_id == "config" {
                bail!("{}: `config` cannot name another file", path.display());
            }
            // a global flag is defined on the root; a given one is seen from the subcommand too
            let m = sub_given.unwrap_or(given);
            push(&mut out, key, &root, &arg_id, value, m, path)?;
        }
    }
    Ok(out)
}

/// The id of the flag `key` names in `cmd` (its long name, with `_` or `-`).
fn flag_of(cmd: &Command, key: &str) -> Option<String> {
    let long = key.replace('_', "-");
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(long.as_str()))
        .map(|a| a.get_id().to_string())
}

/// The flags for `value` of flag `id`, unless the command line or the environment gave it.
fn push(
    out: &mut Vec<(String, Vec<OsString>)>,
    key: &str,
    cmd: &Command,
    id: &str,
    value: &toml::Value,
    given: &ArgMatches,
    path: &Path,
) -> Result<()> {
    if matches!(
        given.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    ) {
        return Ok(());
    }
    let Some(arg) = cmd.get_arguments().find(|a| a.get_id().as_str() == id) else {
        return Ok(());
    };
    let flag = format!("--{}", arg.get_long().unwrap_or(id));
    let takes_value = arg.get_num_args().is_none_or(|n| n.takes_values());
    let text = |v: &toml::Value| -> Result<String> {
        Ok(match v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            // the type, not the value: it may be a secret's
            other => bail!(
                "{}: key `{key}`: a {} is not a plain value",
                path.display(),
                other.type_str()
            ),
        })
    };
    let mut flags = Vec::new();
    match value {
        toml::Value::Boolean(b) if !takes_value => {
            if *b {
                flags.push(OsString::from(&flag));
            }
        }
        toml::Value::Array(items) => {
            for v in items {
                flags.push(OsString::from(&flag));
                flags.push(OsString::from(text(v)?));
            }
        }
        v => {
            flags.push(OsString::from(&flag));
            flags.push(OsString::from(text(v)?));
        }
    }
    if !flags.is_empty() {
        out.push((key.to_string(), flags));
    }
    Ok(())
}
