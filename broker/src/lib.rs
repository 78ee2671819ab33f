//! hero-broker: the broker daemon and the `hero` command line.
//!
//! # Layout
//! - [`daemon`]: runs the queue's upkeep (`hero_protocol::duties`, as every worker does), the
//!   broker's own loops and the bridge, publishes the settings the functions read.
//! - [`loops`]: the broker's own periodic passes ([`loops::batch_ends`],
//!   [`loops::health`]), over one `every` helper.
//! - [`bridge`]: the legacy bridge: [`bridge::mapping`] (flags and config file), and the
//!   inbound, outbound and watch loops.
//! - [`config`]: the broker's settings; [`toml_error`]: a configuration file's TOML error
//!   without the line it quotes.
//! - [`local_redis`]: the `redis-server` child of `hero up` (and of the benchmark).
//! - [`rhai_worker`]: the built-in Rhai handler.
//! - [`telemetry`]: the binary's log lines and, when configured, OTLP trace export.
//! - [`cli`]: the clap definitions, one file per command's body; `main.rs` only parses, picks
//!   the runtime and calls [`cli::run`].
//!
//! - [`http`]: the HTTP face (axum): [`http::api`] (the admin JSON API over
//!   `hero_admin::inspect` and `hero_admin::repair`), [`http::metrics`] (`/metrics`,
//!   `/healthz`, `/readyz`) and [`http::dashboard`] (server-rendered pages and their assets);
//!   `hero broker` and `hero up` start it beside the daemon.
//!
//! The benchmark is not here: it is the `hero-bench` crate under `benches/`.

pub mod bridge;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod http;
pub mod local_redis;
pub mod loops;
pub mod rhai_worker;
pub mod telemetry;
pub mod toml_error;

/// README.md's Rust example, compiled by the doc tests so the front page cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExample;
