//! The worker SDK's error type.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid worker configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Client(#[from] hero_protocol::Error),
}

impl Error {
    /// True when starting again later can help (Redis unreachable), false for bad settings.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Client(e) if e.is_retryable())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
