//! Where limit state lives (SPEC §6): [`redis`] for limits shared by every gateway instance.

pub mod redis;
