//! Real `redis-server` processes for the tests (no mocks): the fixture is
//! `tollgate-testkit`'s, shared with the limiter crate's own tests.

#[allow(unused_imports)]
pub use tollgate_testkit::redis::{free_port, CommandStat, RedisServer};
