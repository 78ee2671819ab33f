//! hero-broker: the broker daemon and the `hero` command line.
//!
//! # Layout
//! - [`bench`]: `hero bench`, hero beside a peer on a throwaway Redis.
//! - [`bridge`]: the legacy bridge: mappings, inbound moves, outbound hand-outs, the watch.
//! - [`broker`]: runs the daemon loops and publishes the settings the functions read.
//! - [`recover`]: presence-driven and idle recovery of abandoned jobs.
//! - [`promote`]: due delayed jobs and retries into their streams.
//! - [`retention`]: deletes ended jobs once the retention time has passed.
//! - [`config`]: the broker's settings.
//! - [`local_redis`]: the `redis-server` child of `hero up`.
//! - [`rhai_worker`]: the built-in Rhai handler.
//! - [`cli`]: the commands; `main.rs` only parses and calls [`cli::run`].

pub mod bench;
pub mod bridge;
pub mod broker;
pub mod cli;
pub mod config;
pub mod local_redis;
pub mod promote;
pub mod recover;
pub mod retention;
pub mod rhai_worker;
