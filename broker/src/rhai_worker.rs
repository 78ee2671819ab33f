//! The built-in worker of `hero worker` and `hero up`: runs a job's `script` as Rhai, with the
//! job's env vars as the map `env`, on a blocking thread that stops when the job is cancelled
//! (timeout, stop, shutdown). The output is the script's value as text. A script reports on
//! itself with `progress(percent, message)` and `log(line)`.

use hero_protocol::Job;
use hero_worker::{JobContext, Outcome};

/// Runs one job's script to its outcome.
pub async fn handle(job: Job, ctx: JobContext) -> Outcome {
    let cancel = ctx.cancel.clone();
    let reporter = ctx.clone();
    let run = tokio::task::spawn_blocking(move || {
        let mut engine = rhai::Engine::new();
        register_reports(&mut engine, &reporter);
        engine.on_progress(move |_| {
            if cancel.is_cancelled() {
                Some(rhai::Dynamic::UNIT)
            } else {
                None
            }
        });
        let mut scope = rhai::Scope::new();
        let env: rhai::Map = job
            .env_vars
            .iter()
            .map(|(k, v)| (k.as_str().into(), v.clone().into()))
            .collect();
        scope.push_constant("env", env);
        // the trace is made here, from the script the closure owns, and only for a failure:
        // a success pays for no copy of its script
        engine
            .eval_with_scope::<rhai::Dynamic>(&mut scope, &job.script)
            .map_err(|e| {
                let trace = script_trace(&e, &job.script);
                (e, trace)
            })
    });
    match run.await {
        Ok(Ok(value)) => Outcome::Done(value.to_string()),
        Ok(Err((e, trace))) => match *e {
            rhai::EvalAltResult::ErrorTerminated(..) => Outcome::Abort("stopped".into()),
            other => {
                ctx.trace(trace);
                Outcome::Fail(format!("script error: {other}"))
            }
        },
        Err(e) => Outcome::Fail(format!("script runner failed: {e}")),
    }
}

/// A failed script's trace: the error, the functions it was raised in (innermost last), and
/// the script's line where it was raised.
fn script_trace(e: &rhai::EvalAltResult, script: &str) -> String {
    let mut out = format!("script error: {e}");
    let mut cur = e;
    while let rhai::EvalAltResult::ErrorInFunctionCall(name, _, inner, at) = cur {
        out.push_str(&format!("\n  in function {name}, called at {at}"));
        cur = inner;
    }
    let at = cur.position();
    if let Some(n) = at.line() {
        if let Some(line) = script.lines().nth(n.saturating_sub(1)) {
            out.push_str(&format!("\n  at line {n}: {}", line.trim()));
        }
    }
    out
}

/// `progress(percent, message)` (percent an integer or a float), `progress(percent)` and
/// `log(line)` for scripts, reporting through the job's context.
fn register_reports(engine: &mut rhai::Engine, ctx: &JobContext) {
    let c = ctx.clone();
    engine.register_fn("progress", move |p: rhai::INT, m: &str| {
        c.progress(p as f64, m);
    });
    let c = ctx.clone();
    engine.register_fn("progress", move |p: rhai::FLOAT, m: &str| c.progress(p, m));
    let c = ctx.clone();
    engine.register_fn("progress", move |p: rhai::INT| c.progress(p as f64, ""));
    let c = ctx.clone();
    engine.register_fn("progress", move |p: rhai::FLOAT| c.progress(p, ""));
    let c = ctx.clone();
    engine.register_fn("log", move |line: &str| c.log(line));
}
