//! Units in the config file: durations, rates, sizes, windows, CIDRs and
//! socket addresses.
//!
//! Each parses with `FromStr` (the error message says what was expected and
//! what was found) and deserialises from any YAML scalar through that same
//! parser, so a bad value fails during deserialisation and the YAML layer
//! attaches its line, column and field path.

use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;
use serde::de::{self, Deserialize, Deserializer, Visitor};

/// Duration units, largest first, with their length in milliseconds.
const DURATION_UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Parses `250ms`, `10s`, `5m`, `1h`, `1d`, compounds with decreasing units
/// such as `1h30m`, and `0`. Integers only.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("expected a duration like \"10s\", got \"{text}\"");
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut rest = s;
    let mut total: u64 = 0;
    // Index into DURATION_UNITS of the last unit seen: units must decrease.
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let (number, after) = rest.split_at(digits);
        let letters = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(letters);
        let index = DURATION_UNITS
            .iter()
            .position(|(name, _)| *name == unit)
            .ok_or_else(bad)?;
        if last.is_some_and(|l| index <= l) {
            return Err(bad());
        }
        last = Some(index);
        let value: u64 = number.parse().map_err(|_| bad())?;
        total = value
            .checked_mul(DURATION_UNITS[index].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(bad)?;
        rest = after;
    }
    Ok(Duration::from_millis(total))
}

/// Writes a duration the way `parse_duration` reads it (`1m30s`, `250ms`,
/// `0s`). Sub-millisecond parts are dropped.
pub fn format_duration(duration: Duration) -> String {
    let mut ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (name, size) in DURATION_UNITS {
        if ms >= size {
            out.push_str(&format!("{}{name}", ms / size));
            ms %= size;
        }
    }
    out
}

/// A duration in the config (`10s`), see [`parse_duration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

impl FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_duration(s).map(Dur)
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

/// A request rate: `count` requests per `period`.
///
/// Written `<count>/<period>`: `10/s`, `100/m`, `5/10s`, `1000/h`,
/// `10000/d`, `3/250ms`. A unit alone (`s`, `m`, `h`, `d`, `ms`) means one of
/// it. `count` is at least 1 and `period` is never zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Requests (cost units) allowed per `period`; at least 1.
    pub count: u64,
    /// The period; greater than zero.
    pub period: Duration,
}

impl Rate {
    /// The limiter's rate: `count` per `period` in microseconds.
    pub fn to_limit(
        &self,
    ) -> Result<tollgate_limit::algorithm::Rate, tollgate_limit::algorithm::ParamError> {
        let period = u64::try_from(self.period.as_micros()).unwrap_or(u64::MAX);
        tollgate_limit::algorithm::Rate::new(self.count, period)
    }
}

impl FromStr for Rate {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("expected \"<n>/<period>\", got \"{text}\"");
        let (count, period) = text.trim().split_once('/').ok_or_else(bad)?;
        let (count, period) = (count.trim(), period.trim());
        if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let count: u64 = count.parse().map_err(|_| bad())?;
        let period = match DURATION_UNITS.iter().find(|(name, _)| *name == period) {
            Some((_, ms)) => Duration::from_millis(*ms),
            None => parse_duration(period).map_err(|_| bad())?,
        };
        if count == 0 {
            return Err(format!(
                "a rate must allow at least 1 request per period, got \"{text}\""
            ));
        }
        if period.is_zero() {
            return Err(format!(
                "a rate's period must be greater than 0, got \"{text}\""
            ));
        }
        Ok(Rate { count, period })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = DURATION_UNITS
            .iter()
            .find(|(_, ms)| Duration::from_millis(*ms) == self.period);
        match unit {
            Some((name, _)) => write!(f, "{}/{name}", self.count),
            None => write!(f, "{}/{}", self.count, format_duration(self.period)),
        }
    }
}

/// The window of a window-based limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Window {
    /// A fixed length (`1m`, `1h`).
    Fixed(Duration),
    /// Calendar months in UTC (`window: month`); only for `fixed_window`.
    Month,
}

impl FromStr for Window {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text.trim() == "month" {
            return Ok(Window::Month);
        }
        parse_duration(text)
            .map(Window::Fixed)
            .map_err(|_| format!("expected a window like \"1m\" or \"month\", got \"{text}\""))
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Window::Fixed(d) => f.write_str(&format_duration(*d)),
            Window::Month => f.write_str("month"),
        }
    }
}

/// Size units (case-insensitive) and their length in bytes.
const SIZE_UNITS: [(&str, u64); 9] = [
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
];

/// A size in bytes: `16KiB`, `10MiB`, `1GiB`, `512B`, `64KB` (1000-based),
/// or a plain integer of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Size(pub u64);

impl FromStr for Size {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("expected a size like \"16KiB\", got \"{text}\"");
        let s = text.trim();
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let (number, unit) = s.split_at(digits);
        let number: u64 = number.parse().map_err(|_| bad())?;
        let unit = unit.trim_start().to_ascii_lowercase();
        let multiplier = if unit.is_empty() {
            1
        } else {
            SIZE_UNITS
                .iter()
                .find(|(name, _)| *name == unit)
                .map(|(_, m)| *m)
                .ok_or_else(bad)?
        };
        number.checked_mul(multiplier).map(Size).ok_or_else(bad)
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, unit) in [
            ("TiB", 1u64 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ] {
            if self.0 >= unit && self.0.is_multiple_of(unit) {
                return write!(f, "{}{name}", self.0 / unit);
            }
        }
        write!(f, "{}B", self.0)
    }
}

/// A network (`10.0.0.0/8`, `2001:db8::/32`) or a single address
/// (`203.0.113.7`, meaning /32 or /128). Host bits are cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr(pub IpNet);

impl FromStr for Cidr {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let s = text.trim();
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(Cidr(net.trunc()));
        }
        s.parse::<IpAddr>()
            .map(|ip| Cidr(IpNet::from(ip)))
            .map_err(|_| {
                format!("expected a CIDR like \"10.0.0.0/8\" or an IP address, got \"{text}\"")
            })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A socket address to listen on: `0.0.0.0:8080`, `[::1]:9901`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Addr(pub SocketAddr);

impl FromStr for Addr {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        text.trim()
            .parse::<SocketAddr>()
            .map(Addr)
            .map_err(|_| format!("expected an address like \"0.0.0.0:8080\", got \"{text}\""))
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Deserialises any YAML scalar through `T::from_str` on its text, so the
/// message of a bad value is the parser's own (`got "10 per s"`) and numbers
/// (`max_body_bytes: 0`) are read like strings.
pub(crate) fn deserialize_from_str<'de, D, T>(
    deserializer: D,
    expecting: &'static str,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr<Err = String>,
{
    deserializer.deserialize_any(FromStrVisitor(expecting, PhantomData))
}

/// The visitor behind [`deserialize_from_str`].
struct FromStrVisitor<T>(&'static str, PhantomData<T>);

impl<T: FromStr<Err = String>> FromStrVisitor<T> {
    fn parse<E: de::Error>(text: &str) -> Result<T, E> {
        T::from_str(text).map_err(E::custom)
    }
}

impl<'de, T: FromStr<Err = String>> Visitor<'de> for FromStrVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        Self::parse(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Self::parse(&v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        Self::parse(&v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        Self::parse(&v.to_string())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        Self::parse(&v.to_string())
    }
}

/// Implements `Deserialize` through `FromStr` for the unit types.
macro_rules! deserialize_via_from_str {
    ($($ty:ty => $expecting:literal),* $(,)?) => {$(
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserialize_from_str(deserializer, $expecting)
            }
        }
    )*};
}

deserialize_via_from_str! {
    Dur => "a duration like \"10s\"",
    Rate => "a rate like \"10/s\"",
    Window => "a window like \"1m\" or \"month\"",
    Size => "a size like \"16KiB\"",
    Cidr => "a CIDR like \"10.0.0.0/8\"",
    Addr => "an address like \"0.0.0.0:8080\"",
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(ms(250)));
        assert_eq!(parse_duration("10s"), Ok(ms(10_000)));
        assert_eq!(parse_duration("5m"), Ok(ms(300_000)));
        assert_eq!(parse_duration("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("1d"), Ok(ms(86_400_000)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1h30m"), Ok(ms(5_400_000)));
    }

    #[test]
    fn bad_durations_say_what_was_expected() {
        for bad in [
            "",
            "10",
            "1.5s",
            "10 s",
            "s",
            "10sec",
            "-1s",
            "30m1h",
            "1s1s",
            "5",
            "99999999999999999999d",
        ] {
            assert_eq!(
                parse_duration(bad),
                Err(format!("expected a duration like \"10s\", got \"{bad}\"")),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn durations_round_trip() {
        for text in [
            "250ms",
            "10s",
            "5m",
            "1h",
            "1d",
            "1h30m",
            "1d2h3m4s5ms",
            "0s",
        ] {
            let d = parse_duration(text).expect("valid");
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
        assert_eq!(format_duration(ms(90_000)), "1m30s");
        assert_eq!(Dur(ms(1500)).to_string(), "1s500ms");
    }

    #[test]
    fn rates_parse() {
        let rate = |s: &str| s.parse::<Rate>();
        assert_eq!(
            rate("10/s"),
            Ok(Rate {
                count: 10,
                period: ms(1000)
            })
        );
        assert_eq!(
            rate("100/m"),
            Ok(Rate {
                count: 100,
                period: ms(60_000)
            })
        );
        assert_eq!(
            rate("5/10s"),
            Ok(Rate {
                count: 5,
                period: ms(10_000)
            })
        );
        assert_eq!(
            rate("1000/h"),
            Ok(Rate {
                count: 1000,
                period: ms(3_600_000)
            })
        );
        assert_eq!(
            rate("10000/d"),
            Ok(Rate {
                count: 10_000,
                period: ms(86_400_000)
            })
        );
        assert_eq!(
            rate("3/250ms"),
            Ok(Rate {
                count: 3,
                period: ms(250)
            })
        );
        assert_eq!(
            rate(" 7 / 2m "),
            Ok(Rate {
                count: 7,
                period: ms(120_000)
            })
        );
    }

    #[test]
    fn bad_rates() {
        for bad in [
            "10 per s", "10", "/s", "x/s", "10/", "10/x", "-1/s", "1.5/s",
        ] {
            assert_eq!(
                bad.parse::<Rate>(),
                Err(format!("expected \"<n>/<period>\", got \"{bad}\"")),
                "{bad:?}"
            );
        }
        assert_eq!(
            "0/s".parse::<Rate>(),
            Err("a rate must allow at least 1 request per period, got \"0/s\"".into())
        );
        assert_eq!(
            "5/0s".parse::<Rate>(),
            Err("a rate's period must be greater than 0, got \"5/0s\"".into())
        );
    }

    #[test]
    fn rates_round_trip() {
        for text in [
            "10/s", "100/m", "5/10s", "1000/h", "10000/d", "3/250ms", "1/1m30s",
        ] {
            let rate: Rate = text.parse().expect("valid");
            assert_eq!(rate.to_string(), text);
        }
    }

    #[test]
    fn sizes() {
        let size = |s: &str| s.parse::<Size>().map(|s| s.0);
        assert_eq!(size("16KiB"), Ok(16 * 1024));
        assert_eq!(size("10MiB"), Ok(10 << 20));
        assert_eq!(size("1GiB"), Ok(1 << 30));
        assert_eq!(size("512B"), Ok(512));
        assert_eq!(size("512"), Ok(512));
        assert_eq!(size("0"), Ok(0));
        assert_eq!(size("64KB"), Ok(64_000));
        assert_eq!(size("2MB"), Ok(2_000_000));
        assert_eq!(size("16kib"), Ok(16 * 1024));
        for bad in ["", "KiB", "16 furlongs", "1.5MiB", "-1", "99999999999TiB"] {
            assert_eq!(
                size(bad),
                Err(format!("expected a size like \"16KiB\", got \"{bad}\"")),
                "{bad:?}"
            );
        }
        for text in ["16KiB", "10MiB", "1GiB", "512B", "3TiB"] {
            let s: Size = text.parse().expect("valid");
            assert_eq!(s.to_string(), text);
        }
    }

    #[test]
    fn windows() {
        assert_eq!("month".parse::<Window>(), Ok(Window::Month));
        assert_eq!("1m".parse::<Window>(), Ok(Window::Fixed(ms(60_000))));
        assert_eq!(
            "monthly".parse::<Window>(),
            Err("expected a window like \"1m\" or \"month\", got \"monthly\"".into())
        );
        assert_eq!(Window::Month.to_string(), "month");
        assert_eq!(Window::Fixed(ms(60_000)).to_string(), "1m");
    }

    #[test]
    fn cidrs_and_addresses() {
        let cidr = |s: &str| s.parse::<Cidr>().map(|c| c.0.to_string());
        assert_eq!(cidr("10.0.0.0/8"), Ok("10.0.0.0/8".into()));
        assert_eq!(cidr("10.1.2.3/8"), Ok("10.0.0.0/8".into()));
        assert_eq!(cidr("203.0.113.7"), Ok("203.0.113.7/32".into()));
        assert_eq!(cidr("2001:db8::1"), Ok("2001:db8::1/128".into()));
        assert_eq!(cidr("2001:db8::/32"), Ok("2001:db8::/32".into()));
        assert_eq!(
            cidr("10.0.0.0/33"),
            Err("expected a CIDR like \"10.0.0.0/8\" or an IP address, got \"10.0.0.0/33\"".into())
        );
        assert_eq!("0.0.0.0:8080".parse::<Addr>().map(|a| a.0.port()), Ok(8080));
        assert_eq!("[::1]:9901".parse::<Addr>().map(|a| a.0.port()), Ok(9901));
        assert_eq!(
            "localhost:80".parse::<Addr>(),
            Err("expected an address like \"0.0.0.0:8080\", got \"localhost:80\"".into())
        );
    }

    #[test]
    fn deserialise_through_from_str() {
        #[derive(Debug, serde::Deserialize)]
        struct T {
            d: Dur,
            s: Size,
            n: Size,
            r: Rate,
        }
        let t: T = serde_yaml::from_str("d: 10s\ns: 16KiB\nn: 0\nr: 5/10s\n").expect("valid");
        assert_eq!(t.d.0, ms(10_000));
        assert_eq!(t.s.0, 16384);
        assert_eq!(t.n.0, 0);
        assert_eq!(t.r.period, ms(10_000));
        let err =
            serde_yaml::from_str::<T>("d: 10s\ns: 1\nn: 0\nr: 10 per s\n").expect_err("bad rate");
        assert_eq!(
            err.to_string(),
            "r: expected \"<n>/<period>\", got \"10 per s\" at line 4 column 4"
        );
    }
}
