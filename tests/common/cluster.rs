//! A real Redis Cluster for the `redis_cluster` store's tests: six
//! `redis-server --cluster-enabled yes` on free ports, joined by
//! `redis-cli --cluster create --cluster-replicas 1` (three masters, each
//! with a replica). Nodes can be killed and restarted (they keep their
//! `nodes.conf`, so they rejoin), failed over, and slots moved.

use std::time::{Duration, Instant};

use super::redis::{free_port, RedisServer};

/// How long the cluster may take to agree that it is healthy.
const SETTLE: Duration = Duration::from_secs(30);

/// Six nodes (more once [`RedisCluster::add_master`] ran);
/// [`RedisCluster::masters`] says which serve slots now.
pub struct RedisCluster {
    /// Every node, in the order given to `redis-cli --cluster create` (the
    /// first three start as masters), then the ones added.
    pub nodes: Vec<RedisServer>,
    /// How many masters serve slots when the cluster is healthy.
    masters: std::sync::atomic::AtomicUsize,
    /// Each node's TLS port, in the order of `nodes` (a TLS cluster only).
    pub tls_ports: Vec<u16>,
}

/// A node's TLS: its certificate and key, and the CA it trusts.
pub struct NodeTls {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub ca: std::path::PathBuf,
}

/// A cluster node on free ports (its bus port too); with `tls`, also a TLS
/// port (returned), and the cluster bus over TLS. The plain port stays, for
/// the harness.
fn node(tls: Option<&NodeTls>) -> (RedisServer, Option<u16>) {
    let mut extra: Vec<String> = Vec::new();
    let mut tls_port = None;
    if let Some(t) = tls {
        let port = free_port();
        tls_port = Some(port);
        for (k, v) in [
            ("--tls-port", port.to_string()),
            ("--tls-cert-file", t.cert.display().to_string()),
            ("--tls-key-file", t.key.display().to_string()),
            ("--tls-ca-cert-file", t.ca.display().to_string()),
            ("--tls-auth-clients", "no".to_owned()),
            ("--tls-cluster", "yes".to_owned()),
            ("--tls-replication", "yes".to_owned()),
        ] {
            extra.extend([k.to_owned(), v]);
        }
    }
    (cluster_node(&extra), tls_port)
}

/// A cluster node with `extra` arguments.
fn cluster_node(extra: &[String]) -> RedisServer {
    let mut args: Vec<String> = vec![
        "--cluster-enabled".into(),
        "yes".into(),
        "--cluster-node-timeout".into(),
        "1000".into(),
        "--cluster-port".into(),
        free_port().to_string(),
        // Keep serving the slots of the other masters while one's are
        // moving to its replica.
        "--cluster-require-full-coverage".into(),
        "no".into(),
        // A replica of a fresh cluster may fail over whatever the age of
        // its last contact with the master.
        "--cluster-replica-validity-factor".into(),
        "0".into(),
    ];
    args.extend_from_slice(extra);
    RedisServer::start_with(&args)
}

/// Runs `redis-cli` with `args`; fails the test if it fails.
fn redis_cli(args: &[String]) {
    let out = super::reaper::command("redis-cli")
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(
        out.status.success(),
        "redis-cli {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl RedisCluster {
    /// Starts six nodes, creates the cluster and waits until every node
    /// says `cluster_state:ok` and knows all six.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(None)
    }

    /// [`RedisCluster::start`] with TLS: each node also serves TLS (its
    /// port in [`RedisCluster::tls_ports`]) and the bus runs over TLS.
    pub fn start_with(tls: Option<&NodeTls>) -> RedisCluster {
        let (nodes, tls_ports): (Vec<RedisServer>, Vec<Option<u16>>) =
            (0..6).map(|_| node(tls)).unzip();
        let mut create: Vec<String> = vec!["--cluster".into(), "create".into()];
        create.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        create.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        redis_cli(&create);
        let cluster = RedisCluster {
            nodes,
            masters: 3.into(),
            tls_ports: tls_ports.into_iter().flatten().collect(),
        };
        cluster.wait_healthy();
        cluster
    }

    /// Starts a node and adds it as a master without slots; it has never
    /// seen the functions library. (`CLUSTER MEET`, not `redis-cli
    /// --cluster add-node`, which copies the functions from another node.)
    /// Returns its place in [`RedisCluster::nodes`].
    pub fn add_master(&mut self) -> usize {
        let (new, _) = node(None);
        // Its bus port, from its own `id ip:port@bus ...` line.
        let me = cluster_nodes(&new);
        let bus = me
            .split(' ')
            .nth(1)
            .and_then(|a| a.split_once('@'))
            .map(|(_, b)| b.split(',').next().unwrap_or(b).to_owned())
            .expect("the node's bus port");
        let port = new.port().to_string();
        let meet = info(
            &self.nodes[0],
            &["CLUSTER", "MEET", "127.0.0.1", &port, &bus],
        );
        assert_eq!(meet.as_deref(), Some("OK"));
        self.nodes.push(new);
        // Known to every node before anything moves to it.
        let deadline = Instant::now() + SETTLE;
        let id = node_id(&self.nodes[self.nodes.len() - 1]);
        while !self.nodes.iter().all(|n| cluster_nodes(n).contains(&id)) {
            assert!(Instant::now() < deadline, "the new node did not join");
            std::thread::sleep(Duration::from_millis(100));
        }
        // And it says the cluster is ok (else it refuses MIGRATE).
        self.wait_healthy();
        self.nodes.len() - 1
    }

    /// `redis-cli --cluster reshard`: moves the `n` lowest slots of `from`
    /// to `to`, their keys with them (MIGRATE, with ASK redirections while
    /// a slot is half moved), then waits until the cluster agrees.
    /// Blocks: in an async test, call it inside `block_in_place`.
    pub fn reshard(&self, from: usize, to: usize, n: usize) {
        let (from, to) = (&self.nodes[from], &self.nodes[to]);
        redis_cli(&[
            "--cluster".into(),
            "reshard".into(),
            format!("127.0.0.1:{}", from.port()),
            "--cluster-from".into(),
            node_id(from),
            "--cluster-to".into(),
            node_id(to),
            "--cluster-slots".into(),
            n.to_string(),
            "--cluster-yes".into(),
        ]);
        // A master without slots that received some counts from now on.
        let serving = self.masters().len();
        self.masters
            .fetch_max(serving, std::sync::atomic::Ordering::SeqCst);
        self.wait_healthy();
    }

    /// The seed URLs (every node).
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port()))
            .collect()
    }

    /// The seeds as a YAML flow list.
    pub fn seeds_yaml(&self) -> String {
        let quoted: Vec<String> = self.seeds().iter().map(|s| format!("\"{s}\"")).collect();
        format!("[{}]", quoted.join(", "))
    }

    /// Waits until every live node says `cluster_state:ok`, three masters
    /// serve all 16384 slots, and each live node agrees on that.
    pub fn wait_healthy(&self) {
        let deadline = Instant::now() + SETTLE;
        loop {
            if self.healthy() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not become healthy within {SETTLE:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn healthy(&self) -> bool {
        let mut seen = 0;
        for n in &self.nodes {
            let Some(info) = info(n, &["CLUSTER", "INFO"]) else {
                continue;
            };
            if !info.contains("cluster_state:ok") || !info.contains("cluster_slots_ok:16384") {
                return false;
            }
            seen += 1;
        }
        seen > 0 && self.masters().len() == self.masters.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The nodes that are masters now (by `ROLE`), reachable ones only.
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| {
                info(n, &["ROLE"]).is_some_and(|r| r.starts_with("master")) && served_slots(n) > 0
            })
            .collect()
    }

    /// The node serving `slot` now.
    pub fn owner(&self, slot: u16) -> &RedisServer {
        &self.nodes[self.owner_index(slot)]
    }

    /// The place in [`RedisCluster::nodes`] of the node serving `slot` now.
    pub fn owner_index(&self, slot: u16) -> usize {
        let want = node_id_of_slot(&self.nodes, slot).expect("some node serves the slot");
        self.nodes
            .iter()
            .position(|n| info(n, &["CLUSTER", "MYID"]).as_deref() == Some(want.as_str()))
            .expect("the slot's node is one of ours")
    }

    /// A replica of `master` (by `CLUSTER REPLICAS`).
    pub fn replica_of(&self, master: &RedisServer) -> &RedisServer {
        let id = info(master, &["CLUSTER", "MYID"]).expect("master answers");
        self.nodes
            .iter()
            .find(|n| {
                info(n, &["ROLE"]).is_some_and(|r| r.starts_with("slave"))
                    && cluster_nodes(n)
                        .lines()
                        .any(|l| l.contains("myself") && l.split(' ').nth(3) == Some(id.as_str()))
            })
            .expect("the master has a replica")
    }
}

/// A command's answer as text (arrays flattened, one item per line), or
/// `None` if the node does not answer.
pub fn info(node: &RedisServer, args: &[&str]) -> Option<String> {
    let client = ::redis::Client::open(node.url()).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_millis(300))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut cmd = ::redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let v: ::redis::Value = cmd.query(&mut conn).ok()?;
    Some(flatten(&v))
}

fn flatten(v: &::redis::Value) -> String {
    use ::redis::Value;
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Array(items) | Value::Set(items) => {
            items.iter().map(flatten).collect::<Vec<_>>().join("\n")
        }
        Value::VerbatimString { text, .. } => text.clone(),
        ::redis::Value::Okay => "OK".to_owned(),
        other => format!("{other:?}"),
    }
}

/// `node`'s id (`CLUSTER MYID`).
pub fn node_id(node: &RedisServer) -> String {
    info(node, &["CLUSTER", "MYID"]).expect("the node answers CLUSTER MYID")
}

/// `CLUSTER NODES` of `node` ("" if it does not answer).
pub fn cluster_nodes(node: &RedisServer) -> String {
    info(node, &["CLUSTER", "NODES"]).unwrap_or_default()
}

/// How many slots `node` serves, by its own `CLUSTER NODES` line.
fn served_slots(node: &RedisServer) -> usize {
    slots(node).len()
}

/// The slots `node` serves, ascending, by its own `CLUSTER NODES` line
/// (`[slot->-id]` entries of slots being moved left out).
pub fn slots(node: &RedisServer) -> Vec<u16> {
    let nodes = cluster_nodes(node);
    let Some(me) = nodes.lines().find(|l| l.contains("myself")) else {
        return Vec::new();
    };
    let mut out: Vec<u16> = me
        .split(' ')
        .skip(8)
        .filter(|r| !r.starts_with('['))
        .flat_map(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            a.parse().unwrap_or(1)..=b.parse().unwrap_or(0)
        })
        .collect();
    out.sort_unstable();
    out
}

/// The id of the node that serves `slot`, as any live node sees it.
fn node_id_of_slot(nodes: &[RedisServer], slot: u16) -> Option<String> {
    for n in nodes {
        let text = cluster_nodes(n);
        for line in text.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            for r in &fields[8..] {
                let (a, b) = match r.split_once('-') {
                    Some((a, b)) => (a.parse().ok(), b.parse().ok()),
                    None => (r.parse().ok(), r.parse().ok()),
                };
                if let (Some(a), Some(b)) = (a, b) {
                    if (a..=b).contains(&slot) {
                        return Some(fields[0].to_owned());
                    }
                }
            }
        }
    }
    None
}
