//! Who the client is: the TCP peer, or what trusted proxies say in
//! `X-Forwarded-For` (docs/configuration/limits.md).
//!
//! Addresses are compared in one form: IPv4-mapped IPv6 (`::ffff:a.b.c.d`,
//! what a dual-stack socket reports for an IPv4 peer) counts as IPv4
//! everywhere, so `10.0.0.0/8` in `trusted_proxies` covers such a peer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::header::{HeaderMap, HeaderValue};
use ipnet::IpNet;

/// The `X-Forwarded-For` header name.
const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) as IPv4; others unchanged.
///
/// Only the mapped form is converted: the deprecated IPv4-compatible form
/// (`::a.b.c.d`) would turn `::1` into `0.0.0.1`.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// An IPv6 address masked to its first `prefix` bits (`server.ipv6_prefix`),
/// so one /64 is one client; IPv4 (and mapped IPv4) is returned unmasked.
/// A `prefix` above 128 is taken as 128.
pub fn group_ipv6(ip: IpAddr, prefix: u8) -> IpAddr {
    match canonical_ip(ip) {
        IpAddr::V6(v6) => {
            let prefix = u32::from(prefix.min(128));
            // checked_shl: a shift by 128 (prefix 0) is an overflow, not 0.
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
        v4 => v4,
    }
}

/// An IP address as a header value (its text, IPv4 written without `fmt`).
pub fn ip_value(ip: IpAddr) -> HeaderValue {
    // An IP's text is ASCII digits, dots, colons and hex letters, which is
    // always a valid header value; the fallbacks are never taken.
    match ip {
        IpAddr::V4(v4) => {
            let mut text = [0u8; 15];
            let len = ipv4_text(v4, &mut text);
            HeaderValue::from_bytes(&text[..len]).unwrap_or(HeaderValue::from_static("unknown"))
        }
        IpAddr::V6(_) => {
            HeaderValue::from_str(&ip.to_string()).unwrap_or(HeaderValue::from_static("unknown"))
        }
    }
}

/// An IP address as text (IPv4 written without `fmt`, as [`ip_value`]).
pub fn ip_text(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let mut text = [0u8; 15];
            let len = ipv4_text(v4, &mut text);
            text[..len].iter().map(|&b| char::from(b)).collect()
        }
        IpAddr::V6(_) => ip.to_string(),
    }
}

/// `v4`'s dotted text into `text`; its length. The common case, written by
/// hand: `Display` goes through the formatting machinery, a tenth of the
/// header work per request.
fn ipv4_text(v4: std::net::Ipv4Addr, text: &mut [u8; 15]) -> usize {
    let mut len = 0;
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            text[len] = b'.';
            len += 1;
        }
        if octet >= 100 {
            text[len] = b'0' + octet / 100;
            len += 1;
        }
        if octet >= 10 {
            text[len] = b'0' + octet / 10 % 10;
            len += 1;
        }
        text[len] = b'0' + octet % 10;
        len += 1;
    }
    len
}

/// Whether `ip` is inside any of `nets` (after [`canonical_ip`]). A net
/// written in IPv4-mapped form (`::ffff:10.0.0.0/104`) covers the IPv4
/// addresses it maps.
pub fn in_any(ip: IpAddr, nets: &[IpNet]) -> bool {
    let ip = canonical_ip(ip);
    nets.iter().any(|net| net_contains(net, ip))
}

fn net_contains(net: &IpNet, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpNet::V6(n6), IpAddr::V4(v4)) if n6.prefix_len() >= 96 => {
            match n6.network().to_ipv4_mapped() {
                Some(base) => {
                    let bits = u32::from(n6.prefix_len() - 96);
                    let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
                    u32::from(v4) & mask == u32::from(base) & mask
                }
                None => false,
            }
        }
        _ => net.contains(&ip),
    }
}

/// Who sent a request: its TCP peer, whether the peer is a trusted proxy,
/// and the client address the deny list, limits and logs use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    /// The TCP peer, in [`canonical_ip`] form.
    pub peer: IpAddr,
    /// Whether the peer is inside `trusted_proxies` (its forwarding
    /// headers are believed).
    pub trusted: bool,
    /// The client's address ([`client_addr`]).
    pub addr: IpAddr,
}

impl Client {
    /// Identify the sender of a request from `peer` with `headers`.
    pub fn identify(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> Client {
        let peer = canonical_ip(peer);
        Client {
            peer,
            trusted: is_trusted(peer, trusted),
            addr: client_addr(peer, headers, trusted),
        }
    }
}

/// Whether `ip` is a trusted proxy (inside `server.trusted_proxies`).
pub fn is_trusted(ip: IpAddr, trusted: &[IpNet]) -> bool {
    in_any(ip, trusted)
}

/// The client's address: the TCP peer, unless the peer is inside `trusted`;
/// then X-Forwarded-For is read right to left (all XFF header fields,
/// comma-separated, in order), skipping addresses inside `trusted`, and the
/// first other address is the client. If every XFF address is trusted (or
/// XFF is absent), the leftmost trusted address read (or the peer) is the
/// client. An unparsable XFF entry stops the walk: the last trusted address
/// seen is the client (never the garbage).
///
/// Entries may carry ports (`1.2.3.4:5678`, `[2001:db8::1]:443`) and
/// surrounding whitespace; empty list elements are skipped (RFC 9110
/// §5.6.1), as in the chain forwarded upstream ([`xff_elements`]); an entry
/// that is not ASCII is garbage. The result is in [`canonical_ip`] form.
pub fn client_addr(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let mut client = canonical_ip(peer);
    if !is_trusted(client, trusted) {
        // An untrusted peer's X-Forwarded-For is whatever it chose to write.
        return client;
    }
    // The rightmost entry was appended by the nearest proxy, so walk from the
    // last field's last entry back towards the first.
    for field in headers.get_all(X_FORWARDED_FOR).iter().rev() {
        for entry in xff_elements(field.as_bytes()).rev() {
            let Some(ip) = std::str::from_utf8(entry).ok().and_then(parse_xff_entry) else {
                return client;
            };
            let ip = canonical_ip(ip);
            if !is_trusted(ip, trusted) {
                return ip;
            }
            client = ip;
        }
    }
    client
}

/// The elements of one X-Forwarded-For field, left to right: split at
/// commas, surrounding spaces and tabs trimmed, empty elements (`a,,b`, a
/// trailing `,`) left out (RFC 9110 §5.6.1). Both the client address
/// ([`client_addr`]) and the chain the gateway forwards are read this way.
pub fn xff_elements(field: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    field
        .split(|&b| b == b',')
        .map(|e| e.trim_ascii())
        .filter(|e| !e.is_empty())
}

/// One X-Forwarded-For entry: an address, optionally with a port
/// (`1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:443`). Anything else (`unknown`, obfuscated identifiers,
/// zone ids) is `None`.
fn parse_xff_entry(entry: &str) -> Option<IpAddr> {
    if let Some(rest) = entry.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return addr.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip);
    }
    let (addr, port) = entry.rsplit_once(':')?;
    if !is_port(port) {
        return None;
    }
    addr.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(s: &str) -> bool {
    // `u16::from_str` alone would accept a leading '+'.
    s.bytes().all(|b| b.is_ascii_digit()) && s.parse::<u16>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn nets(s: &[&str]) -> Vec<IpNet> {
        s.iter().map(|n| n.parse().unwrap()).collect()
    }

    fn xff(lines: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(X_FORWARDED_FOR, HeaderValue::from_static(l));
        }
        h
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_xff_says() {
        let t = nets(&["10.0.0.0/8"]);
        let h = xff(&["1.1.1.1, 10.0.0.1"]);
        assert_eq!(client_addr(ip("203.0.113.9"), &h, &t), ip("203.0.113.9"));
        assert_eq!(client_addr(ip("203.0.113.9"), &h, &[]), ip("203.0.113.9"));
    }

    #[test]
    fn trusted_peer_gives_rightmost_untrusted() {
        let t = nets(&["10.0.0.0/8"]);
        // The client forged "6.6.6.6"; the proxy appended the real address.
        let h = xff(&["6.6.6.6, 198.51.100.7"]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("198.51.100.7"));
    }

    #[test]
    fn chain_of_trusted_proxies_is_skipped() {
        let t = nets(&["10.0.0.0/8", "192.168.0.0/16"]);
        let h = xff(&["6.6.6.6, 198.51.100.7, 192.168.1.1, 10.1.1.1"]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("198.51.100.7"));
    }

    #[test]
    fn all_trusted_gives_leftmost_trusted() {
        let t = nets(&["10.0.0.0/8"]);
        let h = xff(&["10.9.9.9, 10.1.1.1"]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("10.9.9.9"));
        // No XFF at all: the trusted peer itself.
        assert_eq!(
            client_addr(ip("10.0.0.2"), &HeaderMap::new(), &t),
            ip("10.0.0.2")
        );
    }

    #[test]
    fn several_header_lines_are_one_list() {
        let t = nets(&["10.0.0.0/8"]);
        let h = xff(&["6.6.6.6", "198.51.100.7, 10.3.3.3", "10.2.2.2"]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("198.51.100.7"));
        let h = xff(&["198.51.100.7", "10.3.3.3"]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("198.51.100.7"));
    }

    #[test]
    fn garbage_stops_the_walk_at_the_last_trusted() {
        let t = nets(&["10.0.0.0/8"]);
        let h = xff(&["198.51.100.7, unknown, 10.3.3.3"]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("10.3.3.3"));
        let h = xff(&["198.51.100.7, _hidden"]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("10.0.0.2"));
        let h = xff(&["1.2.3.4:99999"]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("10.0.0.2"));
        // A non-ASCII field is garbage too.
        let mut h = HeaderMap::new();
        h.append(
            X_FORWARDED_FOR,
            HeaderValue::from_bytes(b"1.2.3.4, \xff").unwrap(),
        );
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("10.0.0.2"));
    }

    #[test]
    fn empty_elements_and_whitespace_and_ports() {
        let t = nets(&["10.0.0.0/8"]);
        let h = xff(&[" 198.51.100.7:5678 ,, \t10.1.1.1:80 , "]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("198.51.100.7"));
    }

    #[test]
    fn trailing_commas_and_empty_elements_read_as_forwarded() {
        let t = nets(&["10.0.0.0/8"]);
        for (lines, client) in [
            (&["198.51.100.7, "][..], "198.51.100.7"),
            (&["198.51.100.7,"], "198.51.100.7"),
            (&["198.51.100.7,,10.1.1.1"], "198.51.100.7"),
            (&["198.51.100.7", ",", " , "], "198.51.100.7"),
            (&[",,"], "10.0.0.2"),
        ] {
            let h = xff(lines);
            assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip(client), "{lines:?}");
        }
        // Garbage is judged per element: only what is right of the client
        // matters.
        let mut h = HeaderMap::new();
        h.append(
            X_FORWARDED_FOR,
            HeaderValue::from_bytes(b"\xff, 198.51.100.7").unwrap(),
        );
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("198.51.100.7"));
        let elements: Vec<&[u8]> = xff_elements(b" a ,,\tb, ,c,").collect();
        assert_eq!(elements, [&b"a"[..], b"b", b"c"]);
    }

    #[test]
    fn ipv6_entries_and_peers() {
        let t = nets(&["10.0.0.0/8", "fd00::/8"]);
        let h = xff(&["[2001:db8::1]:443, fd00::5"]);
        assert_eq!(client_addr(ip("fd00::1"), &h, &t), ip("2001:db8::1"));
        let h = xff(&["2001:db8::2"]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("2001:db8::2"));
        let h = xff(&["[2001:db8::3]"]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("2001:db8::3"));
        let h = xff(&["[2001:db8::3]x", "[2001:db8::4"]);
        assert_eq!(client_addr(ip("10.0.0.2"), &h, &t), ip("10.0.0.2"));
    }

    #[test]
    fn mapped_ipv4_counts_as_ipv4() {
        let t = nets(&["10.0.0.0/8"]);
        let h = xff(&["::ffff:198.51.100.7, ::ffff:10.1.1.1"]);
        assert_eq!(
            client_addr(ip("::ffff:10.0.0.2"), &h, &t),
            ip("198.51.100.7")
        );
        // An untrusted mapped peer comes back as IPv4.
        assert_eq!(client_addr(ip("::ffff:1.2.3.4"), &h, &t), ip("1.2.3.4"));
        assert_eq!(canonical_ip(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical_ip(ip("::1")), ip("::1"));
        // A trusted net written in mapped form covers plain IPv4.
        assert!(in_any(ip("10.2.3.4"), &nets(&["::ffff:10.0.0.0/104"])));
        assert!(!in_any(ip("11.2.3.4"), &nets(&["::ffff:10.0.0.0/104"])));
        assert!(in_any(ip("11.2.3.4"), &nets(&["::ffff:0.0.0.0/96"])));
        assert!(!in_any(ip("11.2.3.4"), &nets(&["::/0"])));
    }

    #[test]
    fn ipv6_grouping() {
        assert_eq!(
            group_ipv6(ip("2001:db8:1:2:3:4:5:6"), 64),
            ip("2001:db8:1:2::")
        );
        assert_eq!(group_ipv6(ip("2001:db8::1"), 128), ip("2001:db8::1"));
        assert_eq!(group_ipv6(ip("2001:db8::1"), 200), ip("2001:db8::1"));
        assert_eq!(group_ipv6(ip("2001:db8::1"), 0), ip("::"));
        assert_eq!(
            group_ipv6(ip("2001:db8:ffff::1"), 36),
            ip("2001:db8:f000::")
        );
        assert_eq!(group_ipv6(ip("1.2.3.4"), 64), ip("1.2.3.4"));
        assert_eq!(group_ipv6(ip("::ffff:1.2.3.4"), 64), ip("1.2.3.4"));
    }

    #[test]
    fn trust_checks() {
        let t = nets(&["10.0.0.0/8", "2001:db8::/32"]);
        assert!(is_trusted(ip("10.255.0.1"), &t));
        assert!(is_trusted(ip("::ffff:10.0.0.1"), &t));
        assert!(is_trusted(ip("2001:db8:5::1"), &t));
        assert!(!is_trusted(ip("11.0.0.1"), &t));
        assert!(!is_trusted(ip("10.0.0.1"), &[]));
    }

    #[test]
    fn ipv4_text_matches_display() {
        for ip in [
            "0.0.0.0",
            "1.2.3.4",
            "10.20.30.40",
            "100.200.250.255",
            "127.0.0.1",
            "9.99.199.209",
        ] {
            let parsed: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_value(parsed), ip);
        }
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(ip_value(v6), "2001:db8::1");
    }
}
