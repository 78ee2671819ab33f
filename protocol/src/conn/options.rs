//! Where and how to connect: the URL, the namespace, cluster mode, TLS, replicated
//! acknowledgements and the blocking pool; [`ConnectOptions::open`] turns them into a live
//! handle on the namespace's master and the namespace's keys. The producer's `Client`, the
//! operator's `Admin`, workers and brokers all start here.

use crate::error::Result;
use crate::keys::Keyspace;
use crate::name::Namespace;

use super::{names_cluster, Redis, Replicas, Tls, DEFAULT_POOL_SIZE};

/// Connection options. Their `Debug` shows the URL without its password (`shown_url`): a
/// `{:?}` of them in a log line or a panic must not print it.
#[derive(Clone)]
pub struct ConnectOptions {
    pub url: String,
    pub namespace: String,
    /// Redis Cluster: the URL's hosts are seeds, the namespace is wrapped in a hash tag and the
    /// calls go to the node that owns its slot (implied by a `redis+cluster://` URL).
    pub cluster: bool,
    /// Certificates for a `rediss://` URL (else the system's roots, and no client certificate).
    pub tls: Tls,
    /// Replicated acknowledgements: a call that writes returns Ok only once this many replicas
    /// hold it (`WAIT`), else [`crate::Error::NotReplicated`] (0: off).
    pub replicas: Replicas,
    /// Connections for blocking waits (a worker holds two per namespace; each `Client::wait`
    /// and event follower one while it waits).
    pub pool_size: usize,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("url", &super::shown_url(&self.url))
            .field("namespace", &self.namespace)
            .field("cluster", &self.cluster)
            .field("tls", &self.tls)
            .field("replicas", &self.replicas)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

impl ConnectOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            namespace: "hero".into(),
            cluster: false,
            tls: Tls::default(),
            replicas: Replicas::default(),
            pool_size: DEFAULT_POOL_SIZE,
        }
    }

    /// Connects: the namespace's keys (a hash tag in cluster mode) and a live handle on the
    /// master that owns them.
    pub async fn open(&self) -> Result<(Redis, Keyspace)> {
        let ns = Namespace::new(self.namespace.clone())?;
        let cluster = self.cluster || names_cluster(&self.url);
        let keys = if cluster {
            Keyspace::cluster(&ns)
        } else {
            Keyspace::new(&ns)
        };
        let mut redis =
            Redis::open(&self.url, &self.tls, cluster, keys.prefix(), self.pool_size).await?;
        redis.set_replicas(self.replicas)?;
        Ok((redis, keys))
    }

    /// Whether these options name a cluster (the flag, or a `redis+cluster://` URL).
    pub fn is_cluster(&self) -> bool {
        self.cluster || names_cluster(&self.url)
    }

    /// A handle on the master that owns `keys` (another shard of the namespace,
    /// `crate::shard`): in a cluster each shard's slot may live on another node; on one server
    /// `base` is that server already and is shared.
    pub async fn open_shard(&self, base: &Redis, keys: &Keyspace) -> Result<Redis> {
        if !self.is_cluster() {
            return Ok(base.clone());
        }
        let mut redis =
            Redis::open(&self.url, &self.tls, true, keys.prefix(), self.pool_size).await?;
        redis.set_replicas(self.replicas)?;
        Ok(redis)
    }
}
