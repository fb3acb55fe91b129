//! Where limit state lives: [`memory`] (the default, and the `on_error:
//! local` fallback) and [`redis`] (shared by every instance).

pub mod memory;
pub mod redis;
