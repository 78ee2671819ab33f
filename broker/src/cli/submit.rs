//! `hero submit`: submit one job and print its id; and the job arguments `hero run` shares.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use hero_protocol::NewJob;

use super::context::{connect, resolve_url};
use super::{Global, JobArgs, SubmitArgs};

pub(super) async fn submit(g: &Global, args: &SubmitArgs) -> Result<i32> {
    let job = args.job.build()?;
    let client = connect(g, &resolve_url(g)).await?;
    let s = client.submit(&job).await?;
    if g.json {
        println!(
            "{}",
            serde_json::json!({"id": s.id.as_str(), "created": s.created, "status": s.status, "duplicate": s.duplicate})
        );
    } else {
        println!("{}", s.id);
        if s.duplicate {
            eprintln!(
                "job {} holds the uniqueness key ({}); nothing was queued",
                s.id, s.status
            );
        } else if !s.created {
            eprintln!(
                "job {} existed already ({}); nothing changed",
                s.id, s.status
            );
        }
    }
    Ok(0)
}

impl JobArgs {
    pub(super) fn build(&self) -> Result<NewJob> {
        let stdin = || {
            std::io::read_to_string(std::io::stdin())
                .context("reading the script from standard input")
        };
        let script = match (&self.file, self.script.as_deref()) {
            (Some(path), _) if path.as_os_str() == "-" => stdin()?,
            (Some(path), _) => std::fs::read_to_string(path)
                .with_context(|| format!("reading the script from {} (--file)", path.display()))?,
            (None, Some("-")) => stdin()?,
            (None, Some(script)) => script.to_string(),
            (None, None) => bail!("no script: give it as an argument or with --file <path>"),
        };
        // a span of its own: with --otlp the job joins its trace, and the handler's span with it
        let t = &self.target;
        let _span = tracing::info_span!("hero.submit", script_type = %t.script_type).entered();
        let mut b = t.template(&script)?.builder();
        for kv in &self.env {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("--env {kv:?} is not KEY=VALUE"))?;
            b = b.env(k, v);
        }
        if let Some(id) = &self.id {
            b = b.id(id);
        }
        if let Some(d) = self.delay_ms {
            b = b.delay(Duration::from_millis(d));
        }
        if let Some(d) = self.delay {
            b = b.delay(d);
        }
        if let Some(at) = self.at {
            b = b.run_at(at);
        }
        for id in &self.after {
            b = b.after(id);
        }
        if let Some(u) = &self.unique {
            b = b.unique(u);
        }
        if let Some(t) = self.unique_ttl {
            b = b.unique_ttl(Duration::from_secs(t));
        }
        if let Some(k) = &self.limit_key {
            b = b.limit_key(k);
        }
        if let Some(n) = &self.batch {
            b = b.batch(n);
        }
        if let Some(r) = &self.route {
            b = b.route(r);
        }
        Ok(b.build()?)
    }
}
