//! hero-client: the protocol of hero-broker and its producer API.
//!
//! # Layout
//! - [`name`]: checked identifiers (script type, group, instance, job id, priority, consumer).
//! - [`keys`]: every key string; nothing else in the workspace formats one.
//! - [`job`]: the job record, its statuses and the hash codec.
//! - [`function`]: the Redis Functions library (`function/*.lua`) and how it is loaded and called.
//! - [`reply`]: typed forms of the functions' replies.
//! - [`conn`]: pooled and dedicated connections, server capabilities.
//! - [`client`]: the producer API ([`Client`], [`NewJob`]).
//! - [`clock`]: the time the functions are given.
//! - [`error`]: the crate's error type.

pub mod client;
pub mod clock;
pub mod conn;
pub mod error;
pub mod function;
pub mod job;
pub mod keys;
pub mod name;
pub mod reply;
mod wire;

pub use client::{
    Client, ClientOptions, JobResult, JobSummary, ListFilter, NewJob, NewJobBuilder, Page,
    StopOutcome, Submitted,
};
pub use conn::{Capabilities, Redis};
pub use error::{Error, Result};
pub use job::{DecodeError, Job, Status};
pub use keys::{Keyspace, LegacyQueue};
pub use name::{
    ConsumerName, GroupName, InstanceName, JobId, Namespace, Priority, ScriptType, Target,
};
