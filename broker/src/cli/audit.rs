//! `hero audit [--fix]`: the recovery audit of `hero_admin::inspect`, its summary per class and
//! every inconsistency; with --fix each is repaired through `hero_fix` and the audit runs again.
//! Exit 0 when consistent, 1 when an inconsistency is (still) there.

use std::io::{IsTerminal, Write};

use anyhow::Result;
use hero_admin::inspect::{AuditReport, Class};
use hero_client::Client;

use super::context::{connect, resolve_url};
use super::table::{num, render, text};
use super::Global;

pub(super) async fn audit(g: &Global, fix: bool) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    let show_progress = !g.json && std::io::stderr().is_terminal();
    let progress = |what: &str| {
        if show_progress {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\raudit: {what:<60}");
            let _ = err.flush();
        }
    };
    let (report, fixed) = hero_admin::Admin::from(&client)
        .audit(fix, &progress)
        .await?;
    if show_progress {
        eprint!("\r{:<70}\r", "");
    }
    if g.json {
        println!("{}", report.to_json(&fixed));
    } else {
        print_report(&client, &report, &fixed);
    }
    Ok(i32::from(!report.is_consistent()))
}

fn print_report(
    client: &Client,
    report: &AuditReport,
    fixed: &[(hero_admin::inspect::Finding, bool)],
) {
    let rows: Vec<Vec<String>> = report
        .counts()
        .into_iter()
        .map(|(c, n)| {
            vec![
                c.as_str().to_string(),
                n.to_string(),
                if c.is_inconsistency() {
                    "inconsistency"
                } else {
                    "ok"
                }
                .to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        render(&[text("CLASS"), num("COUNT"), text("")], &rows)
    );
    for (f, done) in fixed {
        println!(
            "fixed {} {}: {}",
            f.class,
            f.job.as_deref().or(f.entry.as_deref()).unwrap_or(&f.key),
            if *done { "repaired" } else { "no longer so" }
        );
    }
    for f in report
        .findings
        .iter()
        .filter(|f| f.class.is_inconsistency() || f.class == Class::Orphaned)
    {
        println!(
            "{:<17} {} {}{}: {}",
            f.class.as_str(),
            client.keys().queue_name(&f.key),
            f.job
                .as_deref()
                .map(|j| format!("job {j}"))
                .unwrap_or_default(),
            f.consumer
                .as_deref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default(),
            f.detail
        );
    }
    if report.is_consistent() {
        println!("consistent");
    } else {
        println!("inconsistent: run hero audit --fix to repair");
    }
}
