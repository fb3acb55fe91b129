//! Calendar windows as configured (docs/configuration/quotas.md): a
//! `fixed_window` that counts per billing period in a time zone, whose zone
//! and anchor day may come from the consumer's attributes.

use tollgate_limit::calendar::{Calendar, Unit, Weekday};

/// A value written in the config, or read from the verified consumer's
/// attribute (`attr:NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromAttr<T> {
    /// Written in the config.
    Value(T),
    /// The consumer's attribute of that name; the default when it is
    /// missing or not a valid value.
    Attr(String),
}

/// `window: { calendar, tz, anchor_day, anchor_month, week_start, anchor_time }`.
#[derive(Debug, Clone, PartialEq)]
pub struct CalendarWindow {
    /// `day`, `week`, `month` or `year`.
    pub unit: Unit,
    /// The IANA time zone (default `UTC`).
    pub tz: FromAttr<String>,
    /// Day of the month, 1 to 31 (month and year; default 1).
    pub anchor_day: FromAttr<u8>,
    /// Month of the year, 1 to 12 (year; default 1).
    pub anchor_month: u8,
    /// The day weeks start on (week; default monday).
    pub week_start: Weekday,
    /// The local time periods start at (`"HH:MM"`, default `"00:00"`).
    pub anchor_time: String,
    /// The rule with the written values (and the defaults for attributes).
    pub default: Calendar,
}

// Every field compares as an equivalence (a zone by its rules).
impl Eq for CalendarWindow {}

/// The zone an attribute-driven `tz` falls back to.
pub const DEFAULT_TZ: &str = "UTC";

/// The day an attribute-driven `anchor_day` falls back to.
pub const DEFAULT_ANCHOR_DAY: u8 = 1;

impl CalendarWindow {
    /// Whether the rule depends on the consumer (`tz` or `anchor_day` is
    /// `attr:NAME`).
    pub fn per_consumer(&self) -> bool {
        matches!(self.tz, FromAttr::Attr(_)) || matches!(self.anchor_day, FromAttr::Attr(_))
    }

    /// The rule in zone `tz` anchored on `anchor_day`, with the rest as
    /// configured.
    pub fn with(&self, tz: &str, anchor_day: u8) -> Result<Calendar, String> {
        Calendar::new(
            self.unit,
            tz,
            anchor_day,
            self.anchor_month,
            self.week_start,
            &self.anchor_time,
        )
    }

    /// The zone and anchor day for a consumer whose attribute `name` reads
    /// `attr(name)`: the written values, the attributes where the config
    /// names them, and the defaults where an attribute is missing.
    pub fn resolve<'a>(&'a self, attr: impl Fn(&str) -> Option<&'a str>) -> (&'a str, u8) {
        let tz = match &self.tz {
            FromAttr::Value(tz) => tz.as_str(),
            FromAttr::Attr(name) => attr(name).unwrap_or(DEFAULT_TZ),
        };
        let day = match &self.anchor_day {
            FromAttr::Value(d) => *d,
            FromAttr::Attr(name) => attr(name)
                .and_then(|v| v.trim().parse().ok())
                .filter(|d| (1..=31).contains(d))
                .unwrap_or(DEFAULT_ANCHOR_DAY),
        };
        (tz, day)
    }
}
