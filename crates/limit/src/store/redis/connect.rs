//! How the Redis store reaches Redis (docs/scaling-out.md): one server (`redis`), the
//! master that Sentinel names (`redis_sentinel`), or a Redis Cluster
//! (`redis_cluster`), over TCP or TLS (`rediss://`, rustls, `store.tls`).
//!
//! A [`Source`] makes connections; a [`Conn`] is one, whatever the backend,
//! and the store sends every command through it. The store asks its source
//! for a fresh connection whenever the old one may be stale: its breaker
//! opened, a server answered that it is a replica now (`READONLY`, after a
//! failover), or a node could not be reached (a cluster whose master died
//! moves its slots; Sentinel promotes another server).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind,
    IntoConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult, TlsCertificates, Value,
};

use crate::store::{StoreBackend, StoreTls};

/// How long a background connection attempt may take (it holds up no
/// request: those have their own deadline).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// One connection to the store, whatever the backend. Cheap to clone (each
/// variant is a handle on one multiplexed connection).
#[derive(Clone)]
pub(crate) enum Conn {
    /// None yet: the first one is being made (Sentinel, Cluster). Commands
    /// fail as "not connected".
    Pending,
    /// One server through redis-rs's manager, which reconnects by itself.
    Manager(ConnectionManager),
    /// One server on a plain multiplexed connection (the Sentinel's master,
    /// or a server verified under `store.tls.server_name`); replaced by the
    /// store when it fails.
    Multiplexed(MultiplexedConnection),
    /// Redis Cluster: routes each command to the node of its keys' slot.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Conn::Pending => "Conn::Pending",
            Conn::Manager(_) => "Conn::Manager",
            Conn::Multiplexed(_) => "Conn::Multiplexed",
            Conn::Cluster(_) => "Conn::Cluster",
        })
    }
}

fn not_connected() -> RedisError {
    std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        "no connection to Redis yet",
    )
    .into()
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Pending => Box::pin(async { Err(not_connected()) }),
            Conn::Manager(c) => c.req_packed_command(cmd),
            Conn::Multiplexed(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Pending => Box::pin(async { Err(not_connected()) }),
            Conn::Manager(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Multiplexed(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Manager(c) => c.get_db(),
            Conn::Multiplexed(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Pending => 0,
        }
    }
}

/// Where connections come from.
pub(crate) enum Source {
    /// `redis`: one server.
    Single(Node),
    /// `redis_sentinel`: ask the sentinels for the master, then connect.
    Sentinel {
        /// The sentinels, tried in order.
        sentinels: Vec<Client>,
        /// The monitored service.
        master_name: String,
        /// The master's scheme, credentials and database (its address is
        /// what the sentinels say).
        master: ConnectionInfo,
        /// TLS to the master, if it is `rediss://`.
        tls: Option<StoreTls>,
    },
    /// `redis_cluster`.
    Cluster {
        /// The cluster client (seed nodes, TLS).
        client: ClusterClient,
        /// The seed nodes one by one: the reset subscription listens on one
        /// (a cluster's `PUBLISH` reaches every node).
        seeds: Vec<Client>,
        /// The seed the subscription tries next.
        next_seed: AtomicUsize,
    },
}

/// One server: its client, and for `store.tls.server_name` the name it is
/// verified by (its address is then the URL's host, resolved here).
pub(crate) struct Node {
    /// The client (with the server name as its host when `real` is set).
    pub client: Client,
    /// `(host, port)` to connect to when the client's host is a
    /// `server_name` rather than an address.
    pub real: Option<(String, u16)>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Single(_) => "Source::Single",
            Source::Sentinel { .. } => "Source::Sentinel",
            Source::Cluster { .. } => "Source::Cluster",
        })
    }
}

/// The TLS settings of redis-rs: `store.tls`'s CA and client certificate.
fn certificates(tls: &StoreTls) -> TlsCertificates {
    TlsCertificates {
        client_tls: tls.client.as_ref().map(|(cert, key)| ClientTlsConfig {
            client_cert: cert.clone(),
            client_key: key.clone(),
        }),
        root_cert: tls.ca.clone(),
    }
}

/// A client for `info`, with `store.tls` if given (TLS itself follows the
/// URL's scheme).
fn client(info: ConnectionInfo, tls: Option<&StoreTls>) -> RedisResult<Client> {
    match tls {
        Some(t) if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) => {
            Client::build_with_tls(info, certificates(t))
        }
        _ => Client::open(info),
    }
}

/// A server at `url`, verified as `store.tls.server_name` if set.
fn node(info: ConnectionInfo, tls: Option<&StoreTls>) -> RedisResult<Node> {
    let name = tls.and_then(|t| t.server_name.clone());
    match (info.addr().clone(), name) {
        (ConnectionAddr::TcpTls { host, port, .. }, Some(name)) => {
            let info = info.set_addr(ConnectionAddr::TcpTls {
                host: name,
                port,
                insecure: false,
                tls_params: None,
            });
            Ok(Node {
                client: client(info, tls)?,
                real: Some((host, port)),
            })
        }
        _ => Ok(Node {
            client: client(info, tls)?,
            real: None,
        }),
    }
}

impl Source {
    /// The source of `backend` (a Redis one) with `tls`. Fails only on a
    /// URL redis-rs cannot use (the config has checked them already).
    pub(crate) fn new(backend: &StoreBackend, tls: Option<&StoreTls>) -> RedisResult<Source> {
        match backend {
            StoreBackend::Memory => Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "the memory backend has no Redis",
            ))),
            StoreBackend::Redis { url } => Ok(Source::Single(node(
                url.as_str().into_connection_info()?,
                tls,
            )?)),
            StoreBackend::Sentinel {
                sentinels,
                master_name,
                master,
            } => {
                let sentinels = sentinels
                    .iter()
                    .map(|u| client(u.as_str().into_connection_info()?, tls))
                    .collect::<RedisResult<Vec<_>>>()?;
                let master = match master {
                    Some(url) => url.as_str().into_connection_info()?,
                    None => {
                        // The first sentinel's scheme, no credentials.
                        let first = sentinels[0].get_connection_info();
                        first
                            .clone()
                            .set_redis_settings(redis::RedisConnectionInfo::default())
                    }
                };
                Ok(Source::Sentinel {
                    sentinels,
                    master_name: master_name.clone(),
                    master,
                    tls: tls.cloned(),
                })
            }
            StoreBackend::Cluster { seeds } => {
                let mut builder = ClusterClientBuilder::new(seeds.clone())
                    // The store retries what is safe to retry itself: a
                    // call that may have run is never sent again.
                    .retries(0)
                    .connection_timeout(CONNECT_TIMEOUT);
                if let Some(t) = tls {
                    builder = builder.certs(certificates(t));
                }
                let nodes = seeds
                    .iter()
                    .map(|u| client(u.as_str().into_connection_info()?, tls))
                    .collect::<RedisResult<Vec<_>>>()?;
                Ok(Source::Cluster {
                    client: builder.build()?,
                    seeds: nodes,
                    next_seed: AtomicUsize::new(0),
                })
            }
        }
    }

    /// Whether this is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Source::Cluster { .. })
    }

    /// A connection made without waiting: `redis` without a server name
    /// connects lazily; the others start [`Conn::Pending`] and need
    /// [`Source::connect`].
    pub(crate) fn lazy(&self) -> RedisResult<Option<Conn>> {
        match self {
            Source::Single(Node { client, real: None }) => {
                Ok(Some(Conn::Manager(manager(client)?)))
            }
            _ => Ok(None),
        }
    }

    /// A fresh connection, and the client of the server it reaches (for the
    /// reset subscription; `None` on a cluster).
    pub(crate) async fn connect(&self) -> RedisResult<(Conn, Option<Client>)> {
        match self {
            Source::Single(Node { client, real: None }) => {
                Ok((Conn::Manager(manager(client)?), Some(client.clone())))
            }
            Source::Single(node) => {
                let conn = multiplexed(node).await?;
                Ok((conn, Some(node.client.clone())))
            }
            Source::Sentinel {
                sentinels,
                master_name,
                master,
                tls,
            } => {
                let (host, port) = ask_sentinels(sentinels, master_name).await?;
                let addr = match master.addr() {
                    ConnectionAddr::TcpTls { .. } => ConnectionAddr::TcpTls {
                        host,
                        port,
                        insecure: false,
                        tls_params: None,
                    },
                    _ => ConnectionAddr::Tcp(host, port),
                };
                let node = node(master.clone().set_addr(addr), tls.as_ref())?;
                let mut conn = multiplexed(&node).await?;
                // A sentinel may still name a master that has just been
                // demoted: take it only if it says it is one.
                let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
                if !matches!(role.first(), Some(Value::BulkString(r)) if r == b"master") {
                    return Err(RedisError::from((
                        ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
                        "the server Sentinel names is not a master (yet)",
                    )));
                }
                Ok((conn, Some(node.client)))
            }
            Source::Cluster { client, .. } => {
                let conn = client.get_async_connection().await?;
                Ok((Conn::Cluster(conn), None))
            }
        }
    }

    /// On a cluster, the seed the reset subscription should try next
    /// (round robin, so a dead one is skipped on the next attempt).
    pub(crate) fn next_seed(&self) -> Option<Client> {
        match self {
            Source::Cluster {
                seeds, next_seed, ..
            } => {
                let i = next_seed.fetch_add(1, Ordering::Relaxed);
                seeds.get(i % seeds.len()).cloned()
            }
            _ => None,
        }
    }
}

/// A connection manager on `client` (reconnects by itself).
fn manager(client: &Client) -> RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        // Requests have their own deadline; a response timeout inside the
        // connection would only duplicate it.
        .set_response_timeout(None)
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client.clone(), config)
}

/// A multiplexed connection to `node`, connecting to its real address when
/// its client names it by `server_name`.
async fn multiplexed(node: &Node) -> RedisResult<Conn> {
    let mut config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(None);
    if let Some((host, port)) = &node.real {
        config = config.set_dns_resolver(RealAddress {
            host: host.clone(),
            port: *port,
        });
    }
    let conn = node
        .client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    Ok(Conn::Multiplexed(conn))
}

/// Resolves any name to one server's real address: the client's host is
/// `store.tls.server_name` (what the certificate is checked against), the
/// connection goes to the URL's host.
struct RealAddress {
    host: String,
    port: u16,
}

impl redis::io::AsyncDNSResolver for RealAddress {
    fn resolve<'a, 'b: 'a>(
        &'a self,
        _host: &'b str,
        _port: u16,
    ) -> RedisFuture<'a, Box<dyn Iterator<Item = SocketAddr> + Send + 'a>> {
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), self.port))
                .await?
                .collect();
            Ok(Box::new(addrs.into_iter()) as Box<dyn Iterator<Item = SocketAddr> + Send>)
        })
    }
}

/// The master's address from the first sentinel that knows it.
async fn ask_sentinels(sentinels: &[Client], master_name: &str) -> RedisResult<(String, u16)> {
    let mut last = RedisError::from((ErrorKind::InvalidClientConfig, "no sentinel configured"));
    for sentinel in sentinels {
        let asked = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let mut conn = sentinel
                .get_multiplexed_async_connection_with_config(
                    &AsyncConnectionConfig::new().set_connection_timeout(Some(CONNECT_TIMEOUT)),
                )
                .await?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master_name)
                .query_async::<Option<(String, u16)>>(&mut conn)
                .await
        })
        .await;
        match asked {
            Ok(Ok(Some(addr))) => return Ok(addr),
            Ok(Ok(None)) => {
                last = RedisError::from((
                    ErrorKind::MasterNameNotFoundBySentinel,
                    "the sentinel does not know this master_name",
                    master_name.to_owned(),
                ))
            }
            Ok(Err(e)) => last = e,
            Err(_) => {
                last = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the sentinel did not answer in time",
                )
                .into()
            }
        }
    }
    Err(last)
}
