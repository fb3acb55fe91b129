//! The Lua sources (the repository's top-level `lua/`), embedded at build
//! time, and the Redis Functions library built from them.

/// A file of `lua/`, embedded.
macro_rules! lua_file {
    ($name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../lua/",
            $name,
            ".lua"
        ))
    };
}

/// Helpers every script uses.
pub const COMMON: &str = lua_file!("common");
/// The algorithm libraries, `(name, source)`; each needs only [`COMMON`].
pub const ALGORITHMS: [(&str, &str); 7] = [
    ("fixed_window", lua_file!("fixed_window")),
    ("sliding_window", lua_file!("sliding_window")),
    ("sliding_log", lua_file!("sliding_log")),
    ("token_bucket", lua_file!("token_bucket")),
    ("gcra", lua_file!("gcra")),
    ("leaky_bucket", lua_file!("leaky_bucket")),
    ("concurrency", lua_file!("concurrency")),
];
/// Lockout penalties.
pub const LOCKOUT: &str = lua_file!("lockout");
/// A key's own values turned into an algorithm's params.
pub const QUOTA: &str = lua_file!("quota");
/// Leased limits' maths: a block of units taken, the unspent given back.
pub const LEASE: &str = lua_file!("lease");
/// Entry: decide a request's checks.
pub const DISPATCH: &str = lua_file!("dispatch");
/// Entry: release a concurrency lease.
pub const RELEASE: &str = lua_file!("release");
/// Entry: read one (limit, client)'s state.
pub const INSPECT: &str = lua_file!("inspect");
/// Entry: the clients locked out now.
pub const LOCKOUTS: &str = lua_file!("lockouts");
/// Entry: give back what a Redis Cluster call took for a request another
/// slot's call rejected.
pub const REFUND: &str = lua_file!("refund");
/// Entry: the decision a request would get now, writing nothing.
pub const PROBE: &str = lua_file!("probe");
/// Entry: apply a cost limit's settlement, once.
pub const SETTLE: &str = lua_file!("settle");
/// Entry: give back what leases did not spend.
pub const GIVE_BACK: &str = lua_file!("give_back");

/// The gateway's entry points, `(name, source)`: each file defines
/// `local function <name>(KEYS, ARGV)`. `refund`, `settle` and
/// `give_back` use `dispatch`'s spec parser and `probe` its `check_one`,
/// so they come after it.
pub const ENTRIES: [(&str, &str); 8] = [
    ("dispatch", DISPATCH),
    ("release", RELEASE),
    ("inspect", INSPECT),
    ("lockouts", LOCKOUTS),
    ("refund", REFUND),
    ("probe", PROBE),
    ("settle", SETTLE),
    ("give_back", GIVE_BACK),
];

/// The entries registered with the `no-writes` flag: Redis refuses any
/// write they attempt, so they can never change what they read.
pub const READ_ONLY: [&str; 1] = ["probe"];

/// A Redis Functions library made of the files: the shebang naming it,
/// then [`COMMON`], the algorithms, [`LOCKOUT`] and the entry files as
/// the body of one `build` function returning the entry functions, then
/// one `redis.register_function` per entry ([`READ_ONLY`] ones with the
/// `no-writes` flag). `FUNCTION LOAD` gives a
/// library's chunk no standard library (`math`, `string`, `table`,
/// `setmetatable`... exist only while a function runs), so the first call
/// after a load runs `build`, and every later call reuses what it made:
/// the helpers and algorithm tables are built once per load, not per
/// call.
///
/// The name carries a hash of the code (`tollgate_<12 hex>`) and so do
/// its functions (`tollgate_<12 hex>_dispatch`; Redis function names are
/// global, not per library): gateways of two versions sharing one Redis
/// during a rolling upgrade each call their own code.
#[derive(Debug, Clone)]
pub struct Library {
    /// `tollgate_<12 hex>`.
    pub name: String,
    /// The source for `FUNCTION LOAD REPLACE`.
    pub src: String,
}

/// The library's loader: `entry(name)` is the function registered for
/// entry `name`, which builds the library on the first call of any.
const ENTRY: &str = "local built
local function entry(name)
  local f
  return function(KEYS, ARGV)
if f == nil then
  if built == nil then built = build() end
  f = built[name]
end
return f(KEYS, ARGV)
  end
end
";

impl Library {
    /// The gateway's library: the shared files and [`ENTRIES`].
    pub fn gateway() -> Library {
        Library::with_entries(&ENTRIES)
    }

    /// The shared files, then `entries` (`(name, source)`, each source
    /// defining `local function <name>(KEYS, ARGV)`): the gateway's, or
    /// a test's own beside them.
    pub fn with_entries(entries: &[(&str, &str)]) -> Library {
        let mut shared = vec![COMMON];
        shared.extend(ALGORITHMS.iter().map(|(_, src)| *src));
        shared.push(LOCKOUT);
        shared.push(QUOTA);
        shared.push(LEASE);
        Library::from_parts(&shared, entries)
    }

    /// A library of `shared` (the sources before the entries: common,
    /// the algorithms, the lockout, the quota, the lease, in order) and `entries`: what
    /// [`Library::with_entries`] builds from the embedded files, or
    /// `benches/e2e/lua_cost` from another checkout's `lua/`.
    pub fn from_parts(shared: &[&str], entries: &[(&str, &str)]) -> Library {
        let mut body = String::new();
        for src in shared {
            body.push_str(src);
            body.push('\n');
        }
        for (_, src) in entries {
            body.push('\n');
            body.push_str(src);
        }
        let hash = redis::Script::new(&body).get_hash().to_owned();
        let name = format!("tollgate_{}", &hash[..12]);
        let exports: Vec<String> = entries.iter().map(|(e, _)| format!("{e} = {e}")).collect();
        let mut src = format!(
            "#!lua name={name}\nlocal function build()\n{body}\nreturn {{{}}}\nend\n{ENTRY}",
            exports.join(", ")
        );
        for (entry, _) in entries {
            src.push_str(&if READ_ONLY.contains(entry) {
                format!(
                    "redis.register_function{{function_name = '{name}_{entry}', \
                     callback = entry('{entry}'), flags = {{'no-writes'}}}}\n"
                )
            } else {
                format!("redis.register_function('{name}_{entry}', entry('{entry}'))\n")
            });
        }
        Library { name, src }
    }

    /// The registered name of `entry`: `<library>_<entry>`.
    pub fn function(&self, entry: &str) -> String {
        format!("{}_{entry}", self.name)
    }
}
