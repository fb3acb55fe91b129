//! One test case on each store a limit can live in: the memory store, a
//! real Redis and a real 3-master Redis Cluster, one after the other.

use std::future::Future;

use super::cluster::RedisCluster;
use super::redis::RedisServer;

/// Runs `case` on the memory store (`None`), on a Redis and on a 3-master
/// Redis Cluster (`Some` of the `store:` value, keys under `prefix`), one
/// after the other; the store is printed first, for a failure's output.
pub async fn on_every_store<F, Fut>(prefix: &str, case: F)
where
    F: Fn(Option<String>) -> Fut,
    Fut: Future<Output = ()>,
{
    eprintln!("store: memory");
    case(None).await;
    let redis = RedisServer::start();
    eprintln!("store: redis");
    case(Some(redis_store(&redis, prefix))).await;
    let cluster = RedisCluster::start();
    eprintln!("store: redis_cluster");
    case(Some(cluster_store(&cluster, prefix))).await;
}

/// The `store:` of `redis` (a timeout long enough for a loaded machine;
/// `on_error: deny`, so a store that fails shows).
pub fn redis_store(redis: &RedisServer, prefix: &str) -> String {
    format!(
        "{{ backend: redis, url: \"{}\", prefix: {prefix}, timeout: 5s, on_error: deny }}",
        redis.url()
    )
}

/// The `store:` of `cluster`.
pub fn cluster_store(cluster: &RedisCluster, prefix: &str) -> String {
    format!(
        "{{ backend: redis_cluster, urls: {}, prefix: {prefix}c, timeout: 5s, on_error: deny }}",
        cluster.seeds_yaml()
    )
}
