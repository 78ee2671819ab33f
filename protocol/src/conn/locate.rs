//! Where the namespace's master is. A URL names one server (`redis://`, `rediss://`), a set of
//! Sentinels and the master they watch (`redis+sentinel://h1:p1,h2:p2/<master>[/<db>]`), or the
//! seeds of a Redis Cluster (`redis+cluster://h1:p1,h2:p2`, or a plain URL with
//! `ClientOptions::cluster`). For the last two this module asks which node is the master now:
//! the Sentinels (`SENTINEL GET-MASTER-ADDR-BY-NAME`), or the cluster (`CLUSTER KEYSLOT` of the
//! namespace's hash tag, then `CLUSTER SLOTS`). The `Redis` handle asks again after a broken
//! connection, a READONLY or a MOVED answer.

use std::time::Duration;

use redis::{AsyncConnectionConfig, Value};

use super::node::client_for;
use super::shown::shown_url;
use super::tls::Tls;
use crate::error::{Error, Result};

/// How long a Sentinel or a cluster seed may take to answer one question.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// A URL taken apart: the kind of deployment, the addresses to ask, and how to build the URL
/// of the node they name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// One server, reached at this URL.
    Direct(String),
    /// The master these Sentinels (`host:port`) name `master`.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        node: NodeUrl,
    },
    /// The cluster node that owns the namespace's slot; `seeds` are `host:port`.
    Cluster { seeds: Vec<String>, node: NodeUrl },
}

/// The parts of a URL that every node of a deployment shares: `scheme://[auth@]<addr>[/db]`.
/// Its `Debug` hides the password `auth` may hold.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct NodeUrl {
    scheme: &'static str,
    auth: String,
    db: String,
}

impl std::fmt::Debug for NodeUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("NodeUrl")
            .field(&shown_url(&self.at("<addr>")))
            .finish()
    }
}

impl NodeUrl {
    /// The URL of the node at `addr` (`host:port`).
    pub(crate) fn at(&self, addr: &str) -> String {
        format!("{}://{}{addr}{}", self.scheme, self.auth, self.db)
    }
}

impl Endpoint {
    /// Takes `url` apart; `cluster` treats a plain URL's hosts as cluster seeds.
    pub(crate) fn parse(url: &str, cluster: bool) -> Result<Endpoint> {
        let bad = |why: &str| {
            Error::InvalidInput(format!(
                "{}: {why}. Write redis://host:port, redis+sentinel://host:port,host:port/<master name>, or redis+cluster://host:port,host:port",
                shown_url(url)
            ))
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let (tls, kind) = match scheme {
            "redis" | "rediss" if !cluster => return Ok(Endpoint::Direct(url.to_string())),
            "redis" | "rediss" => (scheme == "rediss", "cluster"),
            "redis+sentinel" | "rediss+sentinel" => (scheme.starts_with("rediss"), "sentinel"),
            "redis+cluster" | "rediss+cluster" => (scheme.starts_with("rediss"), "cluster"),
            "unix" | "redis+unix" => return Ok(Endpoint::Direct(url.to_string())),
            other => {
                return Err(bad(&format!(
                    "`{other}://` is not a Redis URL scheme; the accepted ones are redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster, rediss+cluster and unix"
                )))
            }
        };
        let (auth, rest) = match rest.rfind('@') {
            Some(at) => (rest[..=at].to_string(), &rest[at + 1..]),
            None => (String::new(), rest),
        };
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let addrs: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(str::to_string)
            .collect();
        if addrs.is_empty() {
            return Err(bad("no host:port to ask"));
        }
        if let Some(a) = addrs.iter().find(|a| !a.contains(':')) {
            return Err(bad(&format!("{a} has no port")));
        }
        let scheme = if tls { "rediss" } else { "redis" };
        if kind == "sentinel" {
            let mut parts = path.split('/');
            let master = parts.next().unwrap_or("").to_string();
            if master.is_empty() {
                return Err(bad("the master's name is missing after the hosts"));
            }
            let db = match parts.next() {
                Some(d) if !d.is_empty() => format!("/{d}"),
                _ => String::new(),
            };
            Ok(Endpoint::Sentinel {
                sentinels: addrs,
                master,
                node: NodeUrl { scheme, auth, db },
            })
        } else {
            if !path.is_empty() && path != "0" {
                return Err(bad("a cluster has database 0 only"));
            }
            Ok(Endpoint::Cluster {
                seeds: addrs,
                node: NodeUrl {
                    scheme,
                    auth,
                    db: String::new(),
                },
            })
        }
    }

    /// The URL of the master now: asked of the Sentinels or the cluster (`key` is any key of
    /// the namespace: its slot decides the node), or the URL itself.
    pub(crate) async fn master(&self, key: &str, tls: &Tls) -> Result<String> {
        let client_for = |u: &str| client_for(u, tls);
        match self {
            Endpoint::Direct(url) => Ok(url.clone()),
            Endpoint::Sentinel {
                sentinels,
                master,
                node,
            } => {
                let mut why = Vec::new();
                for s in sentinels {
                    // the URL's user is the master's: a Sentinel is asked without it
                    let sentinel = format!("{}://{s}", node.scheme);
                    match ask_sentinel(&client_for(&sentinel)?, master).await {
                        Ok(addr) => return Ok(node.at(&addr)),
                        Err(e) => why.push(format!("{s}: {e}")),
                    }
                }
                Err(no_master(node, sentinels, why))
            }
            Endpoint::Cluster { seeds, node } => {
                let mut why = Vec::new();
                for s in seeds {
                    match ask_cluster(&client_for(&node.at(s))?, key, s).await {
                        Ok(addr) => return Ok(node.at(&addr)),
                        Err(e) => why.push(format!("{s}: {e}")),
                    }
                }
                Err(no_master(node, seeds, why))
            }
        }
    }
}

fn no_master(node: &NodeUrl, asked: &[String], why: Vec<String>) -> Error {
    Error::Unreachable {
        url: shown_url(&node.at(&asked.join(","))),
        reason: format!("no master found ({})", why.join("; ")),
    }
}

async fn one_shot(client: &redis::Client) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(ASK_TIMEOUT))
        .set_response_timeout(Some(ASK_TIMEOUT));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

async fn ask_sentinel(client: &redis::Client, master: &str) -> redis::RedisResult<String> {
    let mut conn = one_shot(client).await?;
    let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master)
        .query_async(&mut conn)
        .await?;
    let (host, port) = addr.ok_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::MasterNameNotFoundBySentinel,
            "this Sentinel watches no master of that name",
        ))
    })?;
    Ok(format!("{host}:{port}"))
}

/// The master of the slot `key` hashes to, from `CLUSTER SLOTS`
/// (`[start, end, [host, port, id], replicas…]` per range), asked of the seed at `seed`.
async fn ask_cluster(client: &redis::Client, key: &str, seed: &str) -> redis::RedisResult<String> {
    let mut conn = one_shot(client).await?;
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut conn)
        .await?;
    let ranges: Vec<Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await?;
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let (Some(start), Some(end), Some(master)) = (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let (start, end): (i64, i64) = (
            redis::from_redis_value_ref(start)?,
            redis::from_redis_value_ref(end)?,
        );
        if (start..=end).contains(&slot) {
            let Value::Array(node) = master else { break };
            if let (Some(host), Some(port)) = (node.first(), node.get(1)) {
                let mut host: String = redis::from_redis_value_ref(host)?;
                let port: u16 = redis::from_redis_value_ref(port)?;
                if host.is_empty() || host == "?" {
                    // the node does not know its own address (one node, no announce-ip): it is
                    // the seed asked, by the host the seed was reached at
                    host = seed.rsplit_once(':').map_or(seed, |(h, _)| h).to_string();
                }
                return Ok(format!("{host}:{port}"));
            }
        }
    }
    Err(redis::RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
        "no node serves the namespace's slot",
    )))
}

#[cfg(test)]
mod tests {
    use super::Endpoint;

    #[test]
    fn urls_name_their_deployment() {
        assert!(matches!(
            Endpoint::parse("redis://h:1/2", false).unwrap(),
            Endpoint::Direct(u) if u == "redis://h:1/2"
        ));
        let Endpoint::Sentinel {
            sentinels,
            master,
            node,
        } = Endpoint::parse("redis+sentinel://u:p@a:1,b:2/main/3", false).unwrap()
        else {
            panic!("not a sentinel endpoint")
        };
        assert_eq!(sentinels, ["a:1", "b:2"]);
        assert_eq!(master, "main");
        assert_eq!(node.at("m:9"), "redis://u:p@m:9/3");
        let Endpoint::Cluster { seeds, node } =
            Endpoint::parse("rediss+cluster://a:1,b:2", false).unwrap()
        else {
            panic!("not a cluster endpoint")
        };
        assert_eq!(seeds, ["a:1", "b:2"]);
        assert_eq!(node.at("c:3"), "rediss://c:3");
        assert!(matches!(
            Endpoint::parse("redis://a:1", true).unwrap(),
            Endpoint::Cluster { .. }
        ));
        for bad in [
            "redis+sentinel://a:1",
            "redis+sentinel://a/main",
            "redis+cluster:///",
            "redis+cluster://a:1/4",
            "http://nope",
            "nope",
        ] {
            let err = Endpoint::parse(bad, false).expect_err(bad).to_string();
            assert!(
                err.contains("redis+sentinel://"),
                "{bad}: says what is accepted: {err}"
            );
        }
    }
}
