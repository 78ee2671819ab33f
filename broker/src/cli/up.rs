//! `hero up`: Redis (a local one when none is configured), the broker and demo Rhai workers in
//! one process, until ctrl-c; prints where everything is.

use anyhow::Result;

use super::context::{connect, rhai_worker, signal_token};
use super::{Global, UpArgs, WorkerArgs};
use crate::local_redis::LocalRedis;

pub(super) async fn up(g: &Global, args: &UpArgs) -> Result<i32> {
    let cfg = args.broker.config(g.config.as_deref())?;
    let http = args.broker.http_config()?;
    let base = std::env::current_dir()?;
    let (url, local) = match &g.redis_url {
        Some(url) => (url.clone(), None),
        None => {
            let local = LocalRedis::start(&base).await?;
            (local.url.clone(), Some(local))
        }
    };
    let client = connect(g, &url).await?;
    let stop = signal_token().await;
    let served = crate::http::serve(client.clone(), &http, stop.clone()).await?;
    let broker = tokio::spawn(crate::daemon::run(client.clone(), cfg, stop.clone()));
    let mut workers = Vec::new();
    for n in 0..args.workers {
        let wargs = WorkerArgs {
            types: vec!["rhai".into()],
            group: "default".into(),
            instance: Some(format!("up-{}-{n}", std::process::id())),
            concurrency: args.concurrency,
            lease_ms: args.broker.lease_ms,
            presence_ms: 15_000,
            shutdown_ms: 10_000,
            also_namespaces: Vec::new(),
            group_commit: None,
            // the broker beside them does the upkeep
            no_duties: true,
        };
        let worker = rhai_worker(client.clone(), Vec::new(), &wargs)?;
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            worker.run(stop.cancelled_owned()).await
        }));
    }
    // The URL is printed for the user to reach this Redis again: whole when `hero up` made it
    // (a local server, no password), else with its password as *** and the place that holds
    // the real one, so the banner (often pasted into a chat or a ticket) carries no secret.
    let shown = hero_protocol::shown_url(&url);
    let (where_redis, try_with) = match &local {
        Some(l) => (
            format!("{url} (local, data in {})", l.dir.display()),
            format!("from this directory, or with HERO_REDIS_URL={url}"),
        ),
        None if shown == url => (url.clone(), format!("with HERO_REDIS_URL={url}")),
        None => {
            let (from, try_with) = url_source(g, &url);
            (format!("{shown} (the password as in {from})"), try_with)
        }
    };
    println!("hero is up");
    println!("  redis:     {where_redis}");
    println!("  namespace: {}", g.namespace);
    println!("  broker:    running");
    match &served {
        Some((addr, _)) => {
            println!(
                "  dashboard: {} (a one-time sign-in link)",
                http.link(&client, *addr).await?
            );
            if let (true, Some(t)) = (http.generated, &http.token) {
                println!("  API token: {t} (API: /api/queues, metrics: /metrics, as Authorization: Bearer)");
            }
        }
        None => println!("  dashboard: off (--http off)"),
    }
    println!(
        "  workers:   {} x rhai, concurrency {}",
        args.workers, args.concurrency
    );
    println!("  try:       hero run --type rhai '40 + 2'   ({try_with})");
    println!("ready");
    stop.cancelled().await;
    eprintln!("stopping");
    for w in workers {
        match w.await {
            Ok(Err(e)) => eprintln!("worker: {e}"),
            Err(e) => eprintln!("worker task: {e}"),
            Ok(Ok(())) => {}
        }
    }
    let _ = broker.await;
    if let Some((_, task)) = served {
        let _ = task.await;
    }
    if let Some(local) = local {
        local.stop(&base).await;
    }
    Ok(0)
}

/// Where the Redis URL came from, as the user gave it (clap merged the flag, the variable and
/// the file into one value: the flag first, then the variable, then the file), and how another
/// `hero` command gets the same URL.
fn url_source(g: &Global, url: &str) -> (String, String) {
    let flag = std::env::args_os()
        .any(|a| a == "--redis-url" || a.to_string_lossy().starts_with("--redis-url="));
    if !flag && std::env::var("HERO_REDIS_URL").is_ok_and(|v| v == url) {
        return (
            "HERO_REDIS_URL".into(),
            "in a shell with the same HERO_REDIS_URL".into(),
        );
    }
    match &g.config {
        Some(file) if !flag => (
            format!("redis_url of {}", file.display()),
            format!("with --config {}", file.display()),
        ),
        _ => (
            "--redis-url".into(),
            "with HERO_REDIS_URL set to that --redis-url".into(),
        ),
    }
}
