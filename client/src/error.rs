//! The one error type of hero-client, named for what happened from the caller's side, with
//! [`Error::is_retryable`] to tell a passing fault from a final one. Expected outcomes
//! (`lease_lost`, `already completed`, an existing id on submit) are values, not errors.

use std::time::Duration;

use crate::function::ServerCode;
use crate::job::DecodeError;
use crate::name::JobId;

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

    #[error(transparent)]
    InvalidJob(#[from] DecodeError),

    #[error("job {0} not found: it never existed, or its retention time has passed")]
    JobNotFound(JobId),

    #[error("job {job} did not end within {waited:?} (it is {status}); wait longer or follow it with `hero status {job}`")]
    WaitTimedOut {
        job: JobId,
        waited: Duration,
        status: String,
    },

    #[error("cannot reach Redis at {url}: {reason}. Is redis-server running there? Set --redis-url or HERO_REDIS_URL")]
    Unreachable { url: String, reason: String },

    #[error("Redis command failed: {0}")]
    Redis(redis::RedisError),

    #[error("server function failed with {code}: {message}")]
    Server { code: ServerCode, message: String },

    #[error(
        "unexpected reply from Redis: {0}; is the hero function library of this version loaded?"
    )]
    Protocol(String),
}

impl Error {
    /// True when trying the same call again later can succeed (Redis unreachable, connection
    /// dropped, server busy loading); false for bad input and for what the data says.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Unreachable { .. } => true,
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_timeout()
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
                    )
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
        match ServerCode::parse(&code) {
            Some(code) => Error::Server {
                code,
                message: e.detail().unwrap_or_default().to_string(),
            },
            None => Error::Redis(e),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
