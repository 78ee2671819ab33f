//! The one error type of hero-client, named for what happened from the caller's side, with
//! [`Error::is_retryable`] to tell a passing fault from a final one. Expected outcomes
//! (`lease_lost`, `already completed`, an existing id on submit) are values, not errors.
//!
//! This module depends on nothing else in the crate (job ids are carried as the strings they
//! were checked as), so every other module may use it without an import circle. It also holds
//! the codes server functions raise ([`ServerCode`]) and the record decoder's [`DecodeError`].

use std::fmt;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidName {
        what: &'static str,
        value: String,
        reason: String,
    },

    #[error("{0}")]
    InvalidInput(String),

    /// A feature that live processes of an older protocol would refuse or not serve
    /// (`crate::fleet`).
    #[error("{what}, which these live processes do not serve: {}. Upgrade them (or wait until they are gone) and send it again; `hero actors` shows each process's protocol", processes.join(", "))]
    OlderProcesses {
        what: String,
        processes: Vec<String>,
    },

    #[error(transparent)]
    InvalidJob(#[from] DecodeError),

    #[error("job {0} not found: it never existed, or its retention time has passed")]
    JobNotFound(String),

    #[error("job {job} did not end within {waited:?} (it is {status}); wait longer or follow it with `hero status {job}`")]
    WaitTimedOut {
        job: String,
        waited: Duration,
        status: String,
    },

    #[error("cannot reach Redis at {url}: {reason}. Is redis-server running there? Set --redis-url or HERO_REDIS_URL")]
    Unreachable { url: String, reason: String },

    #[error("written on the master but acknowledged by {got} of {wanted} replicas within {timeout:?}: if the master fails now, the write may be lost. Check the replicas (INFO replication), or ask for fewer with --min-replicas")]
    NotReplicated {
        wanted: u32,
        got: u64,
        timeout: Duration,
    },

    #[error("Redis is full: it reached its maxmemory and refuses writes that add data (policy noeviction), so nothing was written and the job was not accepted ({detail}). Free memory (a shorter --retention-secs, fewer waiting jobs, `hero dead purge`) or raise maxmemory, then send it again")]
    OutOfMemory { detail: String },

    #[error("Redis's maxmemory-policy is {policy}: under it Redis may evict any key, a job's record included, losing the job without a trace, so hero accepts no job (nothing was written). Set `maxmemory-policy noeviction` (CONFIG SET or redis.conf; on a managed Redis, its parameter group), or accept the loss with `hero broker --accept-eviction {policy}`")]
    Evicting { policy: String },

    #[error("TLS with Redis at {url} failed: {reason}. Give the CA that signed the server's certificate with --tls-ca (HERO_TLS_CA), and a client certificate with --tls-cert and --tls-key when the server asks for one")]
    Tls { url: String, reason: String },

    #[error("Redis command failed: {0}")]
    Redis(redis::RedisError),

    #[error("server function failed with {code}: {message}")]
    Server { code: ServerCode, message: String },

    #[error(
        "unexpected reply from Redis: {0}; is the hero function library of this version loaded?"
    )]
    Protocol(String),

    #[error("the event log is off in namespace {namespace} (events_max 0), so there are no job events to subscribe to: turn it on with `hero broker --events-max 10000` (the default), or wait on single jobs with `wait`")]
    EventLogOff { namespace: String },
}

impl Error {
    /// True when trying the same call again later can succeed (Redis unreachable, connection
    /// dropped, server busy loading, or a write Redis refused for a while: full, disk failing,
    /// turned replica, too few replicas); false for bad input and for what the data says. A
    /// worker keeps an outcome through every such error and sends it again.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Unreachable { .. } | Error::OutOfMemory { .. } => true,
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_timeout()
                    || e.code().is_some_and(refused_write)
            }
            _ => false,
        }
    }

    pub(crate) fn protocol(what: impl Into<String>) -> Error {
        Error::Protocol(what.into())
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        let code = e.code().unwrap_or_default().to_string();
        if code == "OOM" {
            return Error::OutOfMemory {
                detail: format!("OOM {}", e.detail().unwrap_or_default()),
            };
        }
        match ServerCode::parse(&code) {
            Some(ServerCode::Evicting) => Error::Evicting {
                policy: e.detail().unwrap_or_default().trim().to_string(),
            },
            Some(ServerCode::InvalidCron) => {
                Error::InvalidInput(e.detail().unwrap_or_default().trim().to_string())
            }
            Some(code) => Error::Server {
                code,
                message: e.detail().unwrap_or_default().to_string(),
            },
            None => Error::Redis(e),
        }
    }
}

/// The codes of a write Redis refuses for a while, not for good: full (`OOM`), a failing disk
/// (`MISCONF`), turned replica (`READONLY`, where the handle finds the master again), too few
/// replicas (`NOREPLICAS`), loading, a busy script, a replica cut from its master, a cluster
/// between states.
pub fn refused_write(code: &str) -> bool {
    matches!(
        code,
        "OOM"
            | "MISCONF"
            | "READONLY"
            | "NOREPLICAS"
            | "LOADING"
            | "BUSY"
            | "MASTERDOWN"
            | "TRYAGAIN"
            | "CLUSTERDOWN"
    )
}

/// Error codes the functions raise as `HERO_<CODE> message`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerCode {
    /// The call's arguments do not describe what the function takes.
    BadArg,
    JobNotFound,
    /// A submitted record is one a worker would refuse.
    InvalidJob,
    /// Redis's maxmemory policy may evict records (the message is the policy).
    Evicting,
    /// A recurring job's schedule, zone or spec the cron engine does not take (the message
    /// says what is wrong and what to give): [`Error::InvalidInput`].
    InvalidCron,
}

impl ServerCode {
    pub const ALL: [ServerCode; 5] = [
        ServerCode::BadArg,
        ServerCode::JobNotFound,
        ServerCode::InvalidJob,
        ServerCode::Evicting,
        ServerCode::InvalidCron,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ServerCode::BadArg => "HERO_BAD_ARG",
            ServerCode::JobNotFound => "HERO_JOB_NOT_FOUND",
            ServerCode::InvalidJob => "HERO_INVALID_JOB",
            ServerCode::Evicting => "HERO_EVICTING",
            ServerCode::InvalidCron => "HERO_INVALID_CRON",
        }
    }

    pub fn parse(s: &str) -> Option<ServerCode> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ServerCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job hash that could not be decoded: which key, which field, and what was wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid job record at {key}: field `{field}` {reason}")]
pub struct DecodeError {
    pub key: String,
    pub field: String,
    pub reason: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
