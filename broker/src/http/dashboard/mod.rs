//! The dashboard (`/`): server-rendered pages (maud) over the same reads as the API, with a
//! little JavaScript (`assets/app.js`, compiled into the binary) for what must be live: the
//! event feed (Server-Sent Events), the queue counts (refreshed from `/api/queues`), and the
//! buttons that change jobs (they call the API with the token the operator typed, kept in the
//! browser's local storage, never in a cookie the page could leak).
//!
//! One file per noun: `queues` (the overview with its cards, charts and queues table; the
//! actors), `jobs` (listings and a job's page), `batches`, `ops` (dead letters, the audit, the
//! event log).
//! This module holds the routes, the layout and the pieces every page uses.

use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hero_admin::inspect::Minute;
use hero_protocol::clock;
use hero_protocol::stats::Histogram;
use maud::{html, Markup, DOCTYPE};

use super::{ApiError, App};

mod batches;
mod jobs;
mod ops;
mod queues;

const STYLE: &str = include_str!("../assets/style.css");
const SCRIPT: &str = include_str!("../assets/app.js");

pub fn routes() -> Router<App> {
    Router::new()
        .route("/", get(queues::overview))
        .route("/actors", get(queues::actors))
        .route("/jobs", get(jobs::jobs))
        .route("/jobs/{id}", get(jobs::job))
        .route("/find", get(jobs::go))
        .route("/batches", get(batches::batches))
        .route("/dead", get(ops::dead))
        .route("/audit", get(ops::audit))
        .route("/events", get(ops::events))
        .route(
            "/assets/style.css",
            get(|| async { asset("text/css", STYLE) }),
        )
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript", SCRIPT) }),
        )
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// A page failed: the same layout, saying what went wrong.
struct PageError(ApiError);

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        PageError(e)
    }
}

impl From<hero_protocol::Error> for PageError {
    fn from(e: hero_protocol::Error) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = layout(
            "Error",
            "",
            html! {
                div.empty {
                    h2 { (self.0.status.as_u16()) " " (self.0.status.canonical_reason().unwrap_or("")) }
                    p { (self.0.message) }
                    p { a href="/" { "Back to the queues" } }
                }
            },
        );
        (self.0.status, Html(body.into_string())).into_response()
    }
}

type Page = Result<Html<String>, PageError>;

/// What a browser gets for a page without a valid token: why, and a form to sign in (a POST, so
/// the token stays out of the address and the history); `next` is the page to go on to.
pub(crate) fn sign_in(e: ApiError, next: &str) -> Response {
    let body = layout(
        "Token needed",
        "",
        html! {
            div.empty {
                h2 { (e.status.as_u16()) " " (e.status.canonical_reason().unwrap_or("")) }
                p { (e.message) }
                form method="post" action="/sign-in" #sign-in {
                    input type="password" name="token" placeholder="token" autocomplete="off" aria-label="token";
                    input type="hidden" name="next" value=(next);
                    " "
                    label title="With the admin token: a session that may stop, requeue and retry jobs. Without: it reads only." {
                        input type="checkbox" name="changes" value="1";
                        " allow changes"
                    }
                    " "
                    button.primary type="submit" { "Sign in" }
                }
            }
        },
    );
    (e.status, Html(body.into_string())).into_response()
}

const NAV: [(&str, &str); 7] = [
    ("/", "Queues"),
    ("/actors", "Actors"),
    ("/jobs", "Jobs"),
    ("/batches", "Batches"),
    ("/dead", "Dead letters"),
    ("/audit", "Audit"),
    ("/events", "Events"),
];

fn layout(title: &str, active: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { (title) " · hero" }
                link rel="stylesheet" href="/assets/style.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { span.logo { "◆" } " hero" }
                    nav {
                        @for (href, name) in NAV {
                            a href=(href) class=[(active == href).then_some("active")] { (name) }
                        }
                    }
                    form.token #token-form title="The broker's --http-token: needed to stop, requeue, retry or purge" {
                        input #token type="password" placeholder="API token" autocomplete="off" aria-label="API token";
                        button type="submit" { "Save" }
                    }
                    form.sign-out method="post" action="/sign-out" {
                        button type="submit" title="End this browser's session" { "Sign out" }
                    }
                }
                div #flash role="status" aria-live="polite" {}
                main { (content) }
            }
        }
    }
}

#[allow(clippy::unnecessary_wraps)] // every page handler returns a Page; this is their last step
fn page(title: &str, active: &str, content: Markup) -> Page {
    Ok(Html(marked(&layout(title, active, content).into_string())))
}

/// A whole page with every bidi control and every other control character (a terminal
/// escape, a NUL; not a newline or a tab) that is still raw, in any field, attribute or
/// title, written as the text `U+XXXX`: what `shown` styles in the fields it knows is thus
/// true of every field of every page, those added later included.
fn marked(html: &str) -> String {
    if !html.contains(|c: char| is_bidi_control(c) || is_hidden_control(c)) {
        return html.to_string();
    }
    let mut out = String::with_capacity(html.len() + 16);
    for c in html.chars() {
        if is_bidi_control(c) || is_hidden_control(c) {
            out.push_str(&format!("U+{:04X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// A control character other than a newline, a carriage return or a tab, or an invisible one
/// that changes how text reads: the line and paragraph separators, the zero-width space, joiners
/// and no-break, the byte-order mark.
fn is_hidden_control(c: char) -> bool {
    (c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}'
        )
}

fn ms_text(ms: Option<u64>) -> String {
    match ms {
        None => "–".into(),
        Some(ms) if ms < 1000 => format!("{ms} ms"),
        Some(ms) if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) if ms < 3_600_000 => format!("{:.1} min", ms as f64 / 60_000.0),
        Some(ms) => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

fn when(ms: u64) -> String {
    let iso = clock::iso(ms);
    iso.replace('T', " ").trim_end_matches('Z').to_string()
}

/// Characters that reorder the text around them (U+202E shows "txt.exe" as "exe.txt"): in
/// outputs, errors, scripts and logs a worker or submitter wrote, each is shown as a marked
/// `U+XXXX` instead of taking effect.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Text written by jobs, with bidi controls shown, not obeyed (maud escapes the HTML).
fn shown(text: &str) -> Markup {
    if !text.contains(is_bidi_control) {
        return html! { (text) };
    }
    html! {
        @for (i, part) in text.split(is_bidi_control).enumerate() {
            @if i > 0 {
                @let c = text.match_indices(is_bidi_control).nth(i - 1).map_or('?', |(_, m)| m.chars().next().unwrap_or('?'));
                span.bidi title="a bidirectional control character, shown instead of obeyed" { (format!("U+{:04X}", c as u32)) }
            }
            (part)
        }
    }
}

fn job_link(id: &str) -> Markup {
    html! { a.mono href=(format!("/jobs/{}", urlencode(id))) { (id) } }
}

/// Percent-encodes what may not stand in a path segment or a query value.
fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn quantile(h: &Histogram, q: f64) -> String {
    ms_text(h.quantile_ms(q))
}

/// A small bar chart, one bar a minute, drawn as SVG on the server: no chart library to ship.
fn chart(title: &str, unit: &str, minutes: &[Minute], value: fn(&Minute) -> Option<u64>) -> Markup {
    let values: Vec<Option<u64>> = minutes.iter().map(value).collect();
    let max = values.iter().flatten().copied().max().unwrap_or(0).max(1);
    let n = values.len().max(1);
    let (w, h) = (600.0_f64, 120.0_f64);
    let bw = w / n as f64;
    let last = values.iter().rev().flatten().next().copied();
    html! {
        figure.chart {
            figcaption {
                span { (title) }
                span.num { @if let Some(v) = last { (v) " " (unit) } @else { "no samples yet" } }
            }
            svg viewBox=(format!("0 0 {w} {}", h + 16.0)) preserveAspectRatio="none" role="img" aria-label=(title) {
                line x1="0" y1=(h) x2=(w) y2=(h) class="axis" {}
                @for (i, v) in values.iter().enumerate() {
                    @if let Some(v) = v {
                        @let bh = (*v as f64 / max as f64) * (h - 4.0);
                        rect x=(format!("{:.1}", i as f64 * bw + 1.0)) y=(format!("{:.1}", h - bh)) width=(format!("{:.1}", (bw - 2.0).max(1.0))) height=(format!("{bh:.1}")) {
                            title { (minutes[i].at) ": " (v) " " (unit) }
                        }
                    }
                }
                text x="0" y=(h + 14.0) class="tick" { (minutes.first().map_or("", |m| &m.at[11..])) }
                text x=(w) y=(h + 14.0) class="tick end" { "now" }
                text x="2" y="10" class="tick" { "max " (max) }
            }
        }
    }
}

fn feed(filter: &str) -> Markup {
    html! {
        section.card {
            h2 { "Live events" span.live { "●" } }
            ul #feed data-filter=(filter) {
                li.empty-feed { "Waiting for the next change of any job…" }
            }
        }
    }
}

fn status_pill(status: &str) -> Markup {
    let class = match status {
        "finished" => "ok",
        "error" => "bad",
        "started" => "run",
        _ => "wait",
    };
    html! { span class=(format!("pill {class}")) { (status) } }
}
