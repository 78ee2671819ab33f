//! `hero events`: the latest events of the event log, filtered, as a table or one JSON object per
//! line; with `--follow`, new ones as they happen (XREAD BLOCK, no polling).

use std::io::Write;

use anyhow::{bail, Context, Result};
use hero_admin::inspect::{Event, EventFilter};
use hero_protocol::{EventKind, GroupName, InstanceName, Keyspace, ScriptType, Target};

use super::context::{connect, resolve_url, signal_token};
use super::{EventsArgs, Global};

/// `<type>[/<group>[/<instance>]]`, the way every command names a queue.
pub(super) fn parse_queue(spec: &str) -> Result<Target> {
    let mut parts = spec.split('/');
    let script_type = ScriptType::new(parts.next().unwrap_or_default())
        .with_context(|| format!("queue {spec:?}: expected <type>[/<group>[/<instance>]]"))?;
    let group = parts.next().map(GroupName::new).transpose()?;
    let instance = parts.next().map(InstanceName::new).transpose()?;
    if parts.next().is_some() {
        bail!("queue {spec:?}: expected <type>[/<group>[/<instance>]]");
    }
    if instance.is_some() && group.is_none() {
        bail!("queue {spec:?}: an instance needs its group");
    }
    Ok(Target::new(script_type, group, instance))
}

fn filter(args: &EventsArgs) -> Result<EventFilter> {
    Ok(EventFilter {
        job: args.job.clone(),
        queue: args.queue.as_deref().map(parse_queue).transpose()?,
        script_type: args
            .script_type
            .as_deref()
            .map(ScriptType::new)
            .transpose()?,
        event: args
            .event
            .as_deref()
            .map(str::parse::<EventKind>)
            .transpose()
            .context("--event")?,
    })
}

pub(super) async fn events(g: &Global, args: &EventsArgs) -> Result<i32> {
    let filter = filter(args)?;
    let client = connect(g, &resolve_url(g)).await?;
    let inspector = hero_admin::Inspector::from(&client);
    let latest = inspector.events(&filter, args.last).await?;
    let mut out = std::io::stdout().lock();
    if !g.json && !args.follow && latest.is_empty() {
        eprintln!("no events (the log is empty, off with --events-max 0, or nothing matched)");
    }
    for e in &latest {
        print_event(&mut out, client.keys(), e, g.json)?;
    }
    out.flush()?;
    drop(out);
    if !args.follow {
        return Ok(0);
    }
    // from the last printed entry on, so nothing between the read and the follow is missed
    let after = latest
        .last()
        .map_or_else(|| "$".to_string(), |e| e.id.clone());
    let mut follower = inspector.follow(filter, &after).await?;
    let stop = signal_token().await;
    loop {
        let batch = tokio::select! {
            _ = stop.cancelled() => return Ok(0),
            b = follower.next() => b?,
        };
        let mut out = std::io::stdout().lock();
        for e in &batch {
            print_event(&mut out, client.keys(), e, g.json)?;
        }
        out.flush()?;
    }
}

/// One event as a line: time, event, job, then the fields it has.
pub(super) fn print_event(
    out: &mut impl Write,
    keys: &Keyspace,
    e: &Event,
    json: bool,
) -> Result<()> {
    if json {
        writeln!(out, "{}", e.to_json())?;
        return Ok(());
    }
    let mut line = format!(
        "{}  {:<11} {}",
        hero_protocol::clock::iso(e.at_ms()),
        e.event,
        e.job_id
    );
    if let Some(q) = &e.queue {
        line.push_str(&format!("  queue={}", keys.queue_name(q)));
    }
    if let Some(w) = &e.worker {
        line.push_str(&format!("  worker={w}"));
    }
    if let Some(a) = e.attempt {
        line.push_str(&format!("  attempt={a}"));
    }
    if let Some(d) = e.due_ms {
        line.push_str(&format!("  due={}", hero_protocol::clock::iso(d)));
    }
    if let Some(r) = &e.reason {
        line.push_str(&format!("  ({r})"));
    }
    writeln!(out, "{}", super::table::shown(&line))?;
    Ok(())
}
