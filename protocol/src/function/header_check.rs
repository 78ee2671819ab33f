//! Holds every call builder to its Lua file's header: each key and argument it gives is defined
//! there, at that position, with words that begin with the builder's label, and every fixed
//! position the header defines is given. A builder that swaps two arguments fails here, not in
//! production.

use super::*;

/// One `KEYS[..]` / `ARGV[..]` definition of a header: where it starts, how far apart its
/// repeats are (0: it does not repeat; `usize::MAX`: every position from `at` on), and the
/// words that follow it.
#[derive(Debug)]
struct Def {
    kind: &'static str,
    at: usize,
    every: usize,
    words: String,
}

fn header(src: &str) -> String {
    src.lines()
        .take_while(|l| l.starts_with("--"))
        .map(|l| format!("{}\n", l.trim_start_matches('-')))
        .collect()
}

/// The definitions of a header: a `KEYS[`/`ARGV[` at the start of a line or after two
/// spaces (one mentioned inside a sentence is not a definition).
fn defs(header: &str) -> Vec<Def> {
    let mut out = Vec::new();
    for line in header.lines() {
        for kind in ["KEYS", "ARGV"] {
            let pat = format!("{kind}[");
            let mut from = 0;
            while let Some(pos) = line[from..].find(&pat) {
                let at_pos = from + pos;
                from = at_pos + pat.len();
                let before = &line[..at_pos];
                if !(before.trim().is_empty() || before.ends_with("  ") || before.ends_with(": ")) {
                    continue;
                }
                let Some(close) = line[from..].find(']') else {
                    continue;
                };
                let index = &line[from..from + close];
                let rest = &line[from + close + 1..];
                let words = rest
                    .split("  ")
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                let num = |s: &str| s.trim().parse::<usize>().ok();
                let def = if let Some((a, _)) = index.split_once("..") {
                    num(a).map(|at| (at, usize::MAX))
                } else if let Some((a, b)) = index.split_once('+') {
                    num(a).zip(num(b.trim_end_matches('i')))
                } else {
                    num(index).map(|at| (at, 0))
                };
                if let Some((at, every)) = def {
                    out.push(Def {
                        kind,
                        at,
                        every,
                        words,
                    });
                }
            }
        }
    }
    out
}

fn covers(d: &Def, kind: &str, pos: usize) -> bool {
    d.kind == kind
        && match d.every {
            0 => d.at == pos,
            usize::MAX => pos >= d.at,
            n => pos >= d.at && (pos - d.at).is_multiple_of(n),
        }
}

/// Compares the slots of a built call with its function's header: every labelled key and
/// argument is defined there with words that begin with the label, and every fixed position
/// the header defines was given. Answers what differs.
fn mismatches(f: Function, call: &Call) -> Vec<String> {
    let defs = defs(&header(f.source()));
    let mut wrong = Vec::new();
    let mut pos = [("KEYS", 0usize), ("ARGV", 0usize)];
    for (kind, label) in &call.slots {
        let n = pos.iter_mut().find(|(k, _)| k == kind).expect("kind");
        n.1 += 1;
        if label.is_empty() {
            continue;
        }
        match defs.iter().find(|d| covers(d, kind, n.1)) {
            None => wrong.push(format!(
                "{}: {kind}[{}] ({label}) is not in the header",
                f.name(),
                n.1
            )),
            Some(def) if !def.words.to_lowercase().starts_with(&label.to_lowercase()) => {
                wrong.push(format!(
                    "{}: {kind}[{}] is {label:?} in the builder but {:?} in the header",
                    f.name(),
                    n.1,
                    def.words
                ));
            }
            Some(_) => {}
        }
    }
    for d in defs.iter().filter(|d| d.every == 0) {
        let given = pos.iter().find(|(k, _)| *k == d.kind).map_or(0, |p| p.1);
        if d.at > given {
            wrong.push(format!(
                "{}: the header defines {}[{}] ({}) but the builder gives {given}",
                f.name(),
                d.kind,
                d.at,
                d.words
            ));
        }
    }
    wrong
}

#[test]
fn every_builder_follows_its_lua_header() {
    use crate::name::{ConsumerName, GroupName, InstanceName, JobId, Namespace, ScriptType};
    use crate::{Keyspace, NewJob, Priority, Target};
    let keys = Keyspace::new(&Namespace::new("hero").unwrap());
    let id = JobId::new("j1").unwrap();
    let target = Target::of_type(ScriptType::new("osis").unwrap());
    let stream = keys.work(&target, Priority::DEFAULT);
    let consumer = ConsumerName::new(GroupName::default_group(), InstanceName::new("i").unwrap());
    let job = NewJob::builder("osis", "1").id("j1").build().unwrap();
    let queue = keys
        .parse_legacy_queue(&keys.legacy_work_queue("w1"))
        .unwrap();
    let route = Watch {
        queue: &queue,
        stream: &stream,
        pickup_ms: 1000,
        dual_push: false,
    };
    let mut batch = CompleteBatch::new(&keys, "t", "0", "c");
    for _ in 0..2 {
        batch.push(Ended {
            held: Leased {
                id: &id,
                stream: &stream,
                lease: "1-0",
                reply: "",
            },
            ending: Ending::Done,
            text: "out",
            retry_at_ms: 0,
            ran: Some(std::time::Duration::from_millis(3)),
        });
        batch.trace("Error: boom");
    }
    let calls = [
        (Function::Version, Call::new(Function::Version, 0)),
        (
            Function::Submit,
            submit(&keys, std::slice::from_ref(&job), true),
        ),
        (
            Function::Fetch,
            fetch(
                &keys,
                std::slice::from_ref(&stream),
                &consumer.to_string(),
                5,
                "0",
            ),
        ),
        (Function::Complete, batch.call()),
        (
            Function::Renew,
            renew(
                &keys,
                &id,
                &stream,
                "1-0",
                "c",
                Some(&Report {
                    progress: Some(crate::Progress {
                        percent: 50.0,
                        message: "half".into(),
                    }),
                    lines: vec!["a line".into()],
                }),
            ),
        ),
        (
            Function::Stop,
            stop(
                &keys,
                &id,
                &stream,
                Some(("ctl", "w")),
                "0",
                StopWhy::Timeout,
            ),
        ),
        (
            Function::Recover,
            recover(&keys, &stream, Recovery::Idle(5), 10, 5, "0-0", "0"),
        ),
        (Function::Promote, promote(&keys, &id, &stream, "t")),
        (
            Function::BridgeIn,
            bridge_in(&keys, &keys.legacy_queue(&queue), &stream, &target, 10),
        ),
        (
            Function::BridgeOut,
            bridge_out(&keys, &queue, &stream, 1000, 10, "0"),
        ),
        (
            Function::BridgeWatch,
            bridge_watch(&keys, &route, 5, "0", 10, 0),
        ),
        (
            Function::Requeue,
            requeue(
                &keys,
                &id,
                &stream,
                &crate::job::Placement {
                    target: target.clone(),
                    priority: Priority::new(0).unwrap(),
                },
                Some(("ctl", "w")),
                "0-0",
                "0",
            ),
        ),
        (
            Function::Fix,
            fix(
                &keys,
                Repair::StaleEntry {
                    stream: &stream,
                    entry: "1-0",
                    job: "j1",
                },
            ),
        ),
        (
            Function::Dead,
            dead(
                &keys,
                DeadAction::Retry,
                &[("1-0", &id, &stream), ("2-0", &id, &stream)],
            ),
        ),
        (Function::Pause, pause_key(&keys, "osis/io", "acme", true)),
        (Function::Cron, cron(&keys, "nightly", "{}")),
        (
            Function::Expire,
            expire(
                &keys,
                std::time::Duration::from_secs(1),
                3,
                std::time::Duration::from_secs(2),
            ),
        ),
        (Function::Batch, {
            let spec = CallbackSpec::new(&keys, &job).expect("a plain job makes a callback");
            close_batch(
                &keys,
                &crate::name::BatchName::new("b1").unwrap(),
                Some(&spec),
                Some(&spec),
            )
        }),
        (
            Function::BatchEnds,
            batch_ends(
                &keys,
                "",
                "1-0",
                &[(crate::name::JobId::new("j1").unwrap(), true)],
            ),
        ),
        (Function::Counts, counts(&keys, "osis/io")),
        (Function::Remove, remove(&keys, &id)),
        (Function::Policy, set_policy(&keys, "osis/io", "{}")),
        (
            Function::Beat,
            beat(
                &keys,
                "w1",
                std::time::Duration::from_secs(15),
                "{}",
                Some((&["p1".to_string()], "{}")),
            ),
        ),
        (
            Function::Duties,
            duties(
                &keys,
                "w1",
                std::time::Duration::from_secs(3),
                100,
                true,
                "0",
            ),
        ),
        (
            Function::CronNext,
            cron_next("0 3 * * *", "Europe/Amsterdam", 0, 3),
        ),
        (
            Function::Clean,
            clean(
                &keys,
                std::time::Duration::from_secs(60),
                "error",
                "osis",
                100,
                "",
            ),
        ),
        (Function::Drain, drain(&keys, "osis", true, 100, false, "0")),
        (Function::List, list(&keys, "error", "osis", "", 100)),
        (Function::Keys, fair_keys(&keys, "osis", 0, 100)),
    ];
    let mut wrong = Vec::new();
    for f in Function::ALL {
        let (_, call) = calls
            .iter()
            .find(|(g, _)| *g == f)
            .expect("a call of every function");
        wrong.extend(mismatches(f, call));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_header_check_catches_a_swapped_argument() {
    let mut call = Call::new(Function::Renew, 4);
    call.key("job hash", "k")
        .key("work stream", "s")
        .key("event log", "e")
        .key("config hash", "c");
    call.arg("consumer group", "g")
        .arg("lease", "1-0")
        .arg("consumer name", "c")
        .arg("job id", "j")
        .arg("progress", "");
    assert_eq!(
        mismatches(Function::Renew, &call).len(),
        2,
        "lease and consumer group swapped must fail the check"
    );
}

/// The `local function <name>(` blocks of a Lua source: name, the comment right above it, and
/// its body (up to the next top-level `local`).
fn lua_functions(src: &str) -> Vec<(String, String, String)> {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("local function ") else {
            continue;
        };
        let name = rest.split('(').next().unwrap_or_default().to_string();
        let mut doc = Vec::new();
        let mut k = at;
        while k > 0 && lines[k - 1].starts_with("--") {
            k -= 1;
            doc.push(lines[k]);
        }
        doc.reverse();
        let end = (at + 1..lines.len())
            .find(|&j| lines[j].starts_with("local "))
            .unwrap_or(lines.len());
        out.push((name, doc.join("\n"), lines[at + 1..end].join("\n")));
    }
    out
}

/// The literal names `body` writes through `call`, read from its argument at `arg` (0-based),
/// and whether it makes such a call with a name that is not a literal.
fn literal_writes(body: &str, call: &str, arg: usize) -> (Vec<String>, bool) {
    let (mut names, mut other) = (Vec::new(), false);
    let pat = format!("{call}(");
    let mut from = 0;
    while let Some(pos) = body[from..].find(&pat) {
        let at = from + pos;
        from = at + pat.len();
        let prev = body[..at].chars().last().unwrap_or(' ');
        if prev.is_alphanumeric() || prev == '_' || prev == '.' || prev == ':' {
            continue;
        }
        let args = &body[from..];
        let Some(a) = args.split(',').nth(arg) else {
            continue;
        };
        let a = a.trim();
        if let Some(lit) = a.strip_prefix('\'') {
            names.push(lit.split('\'').next().unwrap_or_default().to_string());
        } else {
            other = true;
        }
    }
    (names, other)
}

/// Whether `body` calls the Lua function `name`.
fn calls(body: &str, name: &str) -> bool {
    let pat = format!("{name}(");
    body.match_indices(&pat).any(|(at, _)| {
        let prev = body[..at].chars().last().unwrap_or(' ');
        !(prev.is_alphanumeric() || prev == '_' || prev == '.' || prev == ':')
    })
}

/// What a function writes: (events, stats), the names of each, with `true` when a name is not a
/// literal (then only the paragraph's presence can be checked).
type Writes = ((Vec<String>, bool), (Vec<String>, bool));

fn direct_writes(body: &str) -> Writes {
    let mut ev = literal_writes(body, "log_event", 1);
    let shared = literal_writes(body, "log_shared", 1);
    ev.0.extend(shared.0);
    ev.1 |= shared.1;
    let mut st = literal_writes(body, "tally", 2);
    let h = literal_writes(body, "histogram", 2);
    st.0.extend(h.0);
    st.1 |= h.1;
    (ev, st)
}

/// The backticked names of the paragraph of `doc` that opens with `label` (up to the next line
/// that opens another `Word:` paragraph); `None` when there is none.
fn paragraph_names(doc: &str, label: &str) -> Option<Vec<String>> {
    let mut lines = doc.lines().map(|l| l.trim_start_matches('-').trim_start());
    let first = lines.find(|l| l.starts_with(label))?;
    let mut text = first.to_string();
    for l in lines {
        let opens = l.split_once(':').is_some_and(|(w, _)| {
            !w.is_empty() && !w.contains(' ') && w.chars().next().is_some_and(char::is_uppercase)
        });
        if opens || l.starts_with("Writes ") || l.starts_with("KEYS[") || l.starts_with("ARGV[") {
            break;
        }
        text.push(' ');
        text.push_str(l);
    }
    Some(
        text.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

/// Every function that writes events or stats says which in its header (`Events:`, `Stats:`),
/// and every helper of the library that does in its comment (`Writes events:`, `Writes
/// stats:`); a name written through a helper counts for the function that calls it. A new
/// `log_event` or `tally` whose name no header gives fails here.
#[test]
fn every_event_and_stat_written_is_named_in_the_header() {
    let helpers = lua_functions(PRELUDE);
    // a helper's writes, with those of the helpers it calls (to a fixed point)
    let mut writes: std::collections::HashMap<String, Writes> = helpers
        .iter()
        .map(|(n, _, b)| (n.clone(), direct_writes(b)))
        .collect();
    loop {
        let mut changed = false;
        for (name, _, body) in &helpers {
            for (other, _, _) in &helpers {
                if other == name || !calls(body, other) {
                    continue;
                }
                let add = writes[other].clone();
                let w = writes.get_mut(name).expect("every helper has writes");
                for n in add.0 .0 {
                    if !w.0 .0.contains(&n) {
                        w.0 .0.push(n);
                        changed = true;
                    }
                }
                for n in add.1 .0 {
                    if !w.1 .0.contains(&n) {
                        w.1 .0.push(n);
                        changed = true;
                    }
                }
                if (add.0 .1 && !w.0 .1) || (add.1 .1 && !w.1 .1) {
                    w.0 .1 |= add.0 .1;
                    w.1 .1 |= add.1 .1;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut missing = Vec::new();
    let mut check = |who: &str, doc: &str, w: &Writes, ev_label: &str, st_label: &str| {
        for (label, (names, other), what) in [(ev_label, &w.0, "event"), (st_label, &w.1, "stat")] {
            if names.is_empty() && !other {
                continue;
            }
            let Some(said) = paragraph_names(doc, label) else {
                missing.push(format!("{who} writes {what}s but has no `{label}` line"));
                continue;
            };
            for n in names {
                if !said.contains(n) {
                    missing.push(format!(
                        "{who} writes {what} `{n}`, not named in its `{label}` line"
                    ));
                }
            }
        }
    };
    for (name, doc, _) in &helpers {
        if [
            "log_event",
            "log_shared",
            "tally",
            "histogram",
            "flush_stats",
        ]
        .contains(&name.as_str())
        {
            continue;
        }
        check(name, doc, &writes[name], "Writes events:", "Writes stats:");
    }
    for f in Function::ALL {
        let src = f.source();
        let head = header(src);
        let mut w = direct_writes(src);
        for (name, _, _) in &helpers {
            if calls(src, name) {
                let (ev, st) = &writes[name];
                w.0 .0.extend(ev.0.iter().cloned());
                w.0 .1 |= ev.1;
                w.1 .0.extend(st.0.iter().cloned());
                w.1 .1 |= st.1;
            }
        }
        // local helpers of the function's own file count as the function
        check(
            &format!("hero_{}", f.short()),
            &head,
            &w,
            "Events:",
            "Stats:",
        );
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
