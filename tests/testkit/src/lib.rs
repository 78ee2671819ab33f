//! The test kit: a throwaway `redis-server` per test on a free loopback port (never 6379, never
//! shared; a port taken between choosing and binding is chosen again), killed by pid when
//! dropped, its log's tail printed when the test fails; child processes of the workspace's
//! binaries with their output captured line by line; workers and brokers in the test process;
//! and bounded waits so a hang fails fast instead of sleeping.
//!
//! One module a concern: `server` and `topology` (redis-servers, clusters, Sentinels), `ports`,
//! `procs` (child processes and the CLI), `inproc` (workers and brokers in the test process),
//! `http` (a broker with its HTTP face), `proxy` (a TCP proxy that throws network faults), `data` (keys and planted states), `wait` (bounded
//! waits). Everything is re-exported here, so a test imports from the crate's root.

mod browser;
mod data;
mod http;
mod inproc;
mod ports;
mod procs;
mod proxy;
mod server;
mod sharded;
mod topology;
mod wait;

/// libfaketime, preloaded into a process to set its clock (scripts/setup installs it).
pub const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

pub use browser::*;
pub use data::*;
pub use http::*;
pub use inproc::*;
pub use ports::*;
pub use procs::*;
pub use proxy::FaultProxy;
pub use server::{info_field, RedisServer};
pub use sharded::*;
pub use topology::{RedisCluster, SentinelSet, MASTER_NAME};
pub use wait::*;
