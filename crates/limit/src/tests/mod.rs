//! Tests that need the crate's internals and real `redis-server`s: the Lua
//! scripts against the Rust maths, and the Redis store around them
//! ([`lua`]); settlements on both stores ([`settle`]); leases' Lua maths
//! against the Rust ([`lease`]); leased limits through limiters that
//! share a Redis ([`leased`]).

mod lease;
mod leased;
mod lua;
mod settle;
