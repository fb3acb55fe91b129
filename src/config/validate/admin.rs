//! `admin:`: the admin API's listener, on an address of its own, and its
//! token.

use std::net::SocketAddr;

use super::server::overlaps;
use super::{Ctx, Result};
use crate::config::model::{AdminConfig, ServerConfig};
use crate::config::raw::{AdminListen, RawAdmin};

impl Ctx<'_> {
    /// `admin:`; its listener may not share a traffic listener of `server`.
    pub(super) fn admin(&mut self, raw: RawAdmin, server: &ServerConfig) -> Result<AdminConfig> {
        let listen = match raw.listen {
            AdminListen::Default => Some(SocketAddr::from(([127, 0, 0, 1], 9901))),
            AdminListen::Disabled => None,
            AdminListen::At(addr) => Some(addr.0),
        };
        if let Some(addr) = listen {
            let traffic = server
                .listen
                .iter()
                .chain(server.tls.iter().flat_map(|t| t.listen.iter()));
            if let Some(other) = traffic.into_iter().find(|t| overlaps(**t, addr)) {
                return Err(self.err(
                    "admin.listen",
                    format!(
                        "{addr} overlaps the traffic listener {other}; the admin API needs its own address"
                    ),
                ));
            }
        }
        Ok(AdminConfig {
            listen,
            token: raw.token.filter(|t| !t.is_empty()),
        })
    }
}
