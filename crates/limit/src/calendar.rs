//! Calendar periods: the billing cycle a quota counts in ("a month from
//! the 15th, New York time"), as instants.
//!
//! A period starts at the latest anchor instant at or before now and ends
//! at the next one. The anchor is a local date and time in an IANA time
//! zone: every day at `anchor_time`; every week on `week_start`; every
//! month on `anchor_day` (clamped to the month's length: anchor 31 is Feb
//! 28 or 29, Mar 31, Apr 30); every year on `anchor_month`/`anchor_day`
//! (Feb 29 is Feb 28 in a year that has none). A local time that does not
//! exist (a spring-forward gap) is the first instant after the gap; one
//! that exists twice (fall back) is the earlier. So a period's length
//! follows the calendar: a Berlin day is 82,800 s on 2026-03-29 and
//! 90,000 s on 2026-10-25.
//!
//! Time zones are jiff's, with the IANA database compiled into the binary
//! (`tzdb-bundle-always`): the same rules on every machine whether or not
//! it has `/usr/share/zoneinfo`, so instances of a fleet (and `simulate`)
//! agree on every period boundary. jiff is maintained, handles the gap and
//! fold cases explicitly, and needs no C library.

use std::str::FromStr;

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;

pub use jiff::civil::Weekday;

use crate::algorithm::fixed_window::Window;
use crate::algorithm::Micros;

/// The unit of a calendar period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// From one `anchor_time` to the next day's.
    Day,
    /// From `week_start` at `anchor_time` to the next.
    Week,
    /// From `anchor_day` at `anchor_time` to the next month's.
    Month,
    /// From `anchor_month`/`anchor_day` at `anchor_time` to the next year's.
    Year,
}

impl Unit {
    /// Its name as written (`day`, `week`, `month`, `year`).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The longest a period of this unit can be: a day of 25 hours (fall
    /// back), a week of 7 days and an hour, a month of 31 days and an hour,
    /// a year of 366 days and an hour.
    pub fn longest(self) -> Micros {
        const HOUR: Micros = 3_600_000_000;
        const DAY: Micros = 24 * HOUR;
        HOUR + match self {
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 31 * DAY,
            Unit::Year => 366 * DAY,
        }
    }
}

impl FromStr for Unit {
    type Err = String;
    fn from_str(text: &str) -> Result<Unit, String> {
        match text {
            "day" => Ok(Unit::Day),
            "week" => Ok(Unit::Week),
            "month" => Ok(Unit::Month),
            "year" => Ok(Unit::Year),
            _ => Err(format!("expected day, week, month or year, got \"{text}\"")),
        }
    }
}

/// A weekday by its English name, any case (`monday`, `Sunday`).
pub fn weekday(name: &str) -> Result<Weekday, String> {
    const DAYS: [(&str, Weekday); 7] = [
        ("monday", Weekday::Monday),
        ("tuesday", Weekday::Tuesday),
        ("wednesday", Weekday::Wednesday),
        ("thursday", Weekday::Thursday),
        ("friday", Weekday::Friday),
        ("saturday", Weekday::Saturday),
        ("sunday", Weekday::Sunday),
    ];
    DAYS.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(_, d)| d)
        .ok_or_else(|| format!("expected a weekday like monday, got \"{name}\""))
}

/// Whether `tz` names a time zone of the bundled IANA database.
pub fn is_time_zone(tz: &str) -> bool {
    TimeZone::get(tz).is_ok()
}

/// A calendar period rule, in one time zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Calendar {
    unit: Unit,
    tz: TimeZone,
    /// Day of the month, 1..=31 (month and year).
    anchor_day: i8,
    /// Month, 1..=12 (year).
    anchor_month: i8,
    /// The first day of a week (week).
    week_start: Weekday,
    /// The local time periods start at.
    anchor_time: Time,
}

/// One period: `[start, end)`, in microseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    /// Its first instant.
    pub start: Micros,
    /// The next period's first instant.
    pub end: Micros,
}

impl Period {
    /// Its length in microseconds (`w`).
    pub fn len(&self) -> Micros {
        self.end - self.start
    }

    /// Whether it is empty (never, for a period a [`Calendar`] gives).
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

impl Calendar {
    /// A rule: `unit` in the IANA zone `tz` (`UTC`, `America/New_York`),
    /// anchored on `anchor_day` (1..=31) of `anchor_month` (1..=12), weeks
    /// starting on `week_start`, at `anchor_time` (`"HH:MM"` or
    /// `"HH:MM:SS"`). The error says which part is wrong.
    pub fn new(
        unit: Unit,
        tz: &str,
        anchor_day: u8,
        anchor_month: u8,
        week_start: Weekday,
        anchor_time: &str,
    ) -> Result<Calendar, String> {
        let tz = TimeZone::get(tz)
            .map_err(|_| format!("unknown time zone \"{tz}\" (an IANA name like Europe/Berlin)"))?;
        if !(1..=31).contains(&anchor_day) {
            return Err(format!("anchor_day is 1 to 31, got {anchor_day}"));
        }
        if !(1..=12).contains(&anchor_month) {
            return Err(format!("anchor_month is 1 to 12, got {anchor_month}"));
        }
        let anchor_time: Time = anchor_time
            .parse()
            .map_err(|_| format!("anchor_time is \"HH:MM\", got \"{anchor_time}\""))?;
        Ok(Calendar {
            unit,
            tz,
            anchor_day: anchor_day as i8,
            anchor_month: anchor_month as i8,
            week_start,
            anchor_time,
        })
    }

    /// The period `now` (microseconds since the epoch) falls in.
    pub fn period(&self, now: Micros) -> Period {
        let now =
            Timestamp::from_microsecond(now.min(i64::MAX as u64) as i64).unwrap_or(Timestamp::MAX);
        let today = self.tz.to_datetime(now).date();
        // The anchor date of the period holding `today`'s local date, at
        // the latest; one step back when its instant is still to come.
        let mut start = self.anchor_on_or_before(today);
        if self.instant(start) > now {
            start = self.step(start, -1);
        }
        let end = self.step(start, 1);
        Period {
            start: micros(self.instant(start)),
            end: micros(self.instant(end)),
        }
    }

    /// The `fixed_window` window for `now`: the period holding it and the
    /// one after ([`Window::Calendar`]), so a store whose clock is a little
    /// ahead of the caller's still counts in the right period.
    pub fn window(&self, now: Micros) -> Window {
        let this = self.period(now);
        let next = self.period(this.end);
        Window::Calendar {
            start: this.start,
            end: this.end,
            next: next.end.max(this.end + 1),
        }
    }

    /// The latest anchor date at or before `date` (by date alone).
    fn anchor_on_or_before(&self, date: Date) -> Date {
        match self.unit {
            Unit::Day => date,
            Unit::Week => {
                let back = (date.weekday().to_monday_zero_offset()
                    - self.week_start.to_monday_zero_offset())
                .rem_euclid(7);
                date.checked_sub(jiff::Span::new().days(i64::from(back)))
                    .unwrap_or(date)
            }
            Unit::Month => {
                let this = self.month_anchor(date.year(), date.month());
                if this <= date {
                    this
                } else {
                    self.step(this, -1)
                }
            }
            Unit::Year => {
                let this = self.year_anchor(date.year());
                if this <= date {
                    this
                } else {
                    self.year_anchor(date.year() - 1)
                }
            }
        }
    }

    /// The anchor date `n` periods after (or before) the anchor `date`.
    fn step(&self, date: Date, n: i8) -> Date {
        let days = |d: i64| {
            date.checked_add(jiff::Span::new().days(d * i64::from(n)))
                .unwrap_or(date)
        };
        match self.unit {
            Unit::Day => days(1),
            Unit::Week => days(7),
            Unit::Month => {
                let months =
                    i32::from(date.year()) * 12 + i32::from(date.month()) - 1 + i32::from(n);
                let (year, month) = (months.div_euclid(12), months.rem_euclid(12) + 1);
                self.month_anchor(year as i16, month as i8)
            }
            Unit::Year => self.year_anchor(date.year() + i16::from(n)),
        }
    }

    /// `anchor_day` of that month, clamped to its length.
    fn month_anchor(&self, year: i16, month: i8) -> Date {
        let first = Date::new(year, month, 1).unwrap_or(Date::MIN);
        let day = self.anchor_day.min(first.days_in_month());
        Date::new(year, month, day).unwrap_or(first)
    }

    /// `anchor_month`/`anchor_day` of that year, clamped to the month.
    fn year_anchor(&self, year: i16) -> Date {
        let first = Date::new(year, self.anchor_month, 1).unwrap_or(Date::MIN);
        let day = self.anchor_day.min(first.days_in_month());
        Date::new(year, self.anchor_month, day).unwrap_or(first)
    }

    /// The instant `anchor_time` on `date` is, in the zone: in a gap, the
    /// first instant after it; in a fold, the earlier one.
    fn instant(&self, date: Date) -> Timestamp {
        let local: DateTime = date.to_datetime(self.anchor_time);
        let at = |offset: jiff::tz::Offset| offset.to_timestamp(local).unwrap_or(Timestamp::MAX);
        match self.tz.to_ambiguous_timestamp(local).offset() {
            AmbiguousOffset::Unambiguous { offset } => at(offset),
            // Earlier: the offset in force before the clocks went back.
            AmbiguousOffset::Fold { before, .. } => at(before),
            // Read with the offset after the gap, the local time is an
            // instant before the transition; the transition is the first
            // instant after the gap.
            AmbiguousOffset::Gap { after, .. } => self
                .tz
                .following(at(after))
                .next()
                .map_or(at(after), |t| t.timestamp()),
        }
    }
}

/// Microseconds since the epoch (0 before it).
fn micros(t: Timestamp) -> Micros {
    u64::try_from(t.as_microsecond()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::SECOND;

    /// The instant of a local time in `tz`, as micros (unambiguous times
    /// only; a fold's earlier instant).
    fn local(tz: &str, text: &str) -> Micros {
        let dt: DateTime = text.parse().unwrap();
        let z = dt.to_zoned(TimeZone::get(tz).unwrap()).unwrap();
        micros(z.timestamp())
    }

    fn cal(unit: Unit, tz: &str, day: u8, month: u8, time: &str) -> Calendar {
        Calendar::new(unit, tz, day, month, Weekday::Monday, time).unwrap()
    }

    const NY: &str = "America/New_York";

    #[test]
    fn new_york_months() {
        let c = cal(Unit::Month, NY, 1, 1, "00:00");
        let march = c.period(local(NY, "2026-03-31T23:59:59"));
        assert_eq!(march.start, local(NY, "2026-03-01T00:00"));
        assert_eq!(march.end, local(NY, "2026-04-01T00:00"));
        let april = c.period(local(NY, "2026-04-01T00:00"));
        assert_eq!(april.start, march.end);
        // At 23:00 on March 31, an hour is left.
        let at = local(NY, "2026-03-31T23:00");
        assert_eq!((c.period(at).end - at) / SECOND, 3600);
        // March has 31 days, less the hour the clocks went forward.
        assert_eq!(march.len() / SECOND, 31 * 86_400 - 3600);
    }

    #[test]
    fn anchor_day_31_is_clamped_to_the_month() {
        let c = cal(Unit::Month, NY, 31, 1, "00:00");
        let p = c.period(local(NY, "2027-02-10T12:00"));
        assert_eq!(p.start, local(NY, "2027-01-31T00:00"));
        assert_eq!(p.end, local(NY, "2027-02-28T00:00"));
        let p = c.period(p.end);
        assert_eq!(p.end, local(NY, "2027-03-31T00:00"));
        let p = c.period(p.end);
        assert_eq!(p.end, local(NY, "2027-04-30T00:00"));
        // Just before an anchor: still the period before.
        let p = c.period(local(NY, "2027-03-30T23:59:59"));
        assert_eq!(p.start, local(NY, "2027-02-28T00:00"));
    }

    #[test]
    fn anchored_on_the_15th_from_new_york() {
        let c = cal(Unit::Month, NY, 15, 1, "00:00");
        let p = c.period(local(NY, "2026-11-26T17:00"));
        assert_eq!(p.start, local(NY, "2026-11-15T00:00"));
        assert_eq!(p.end, local(NY, "2026-12-15T00:00"));
        let p = c.period(local(NY, "2026-11-14T23:59:59"));
        assert_eq!(p.start, local(NY, "2026-10-15T00:00"));
    }

    #[test]
    fn berlin_days_follow_the_clock_changes() {
        const B: &str = "Europe/Berlin";
        let c = cal(Unit::Day, B, 1, 1, "00:00");
        assert_eq!(
            c.period(local(B, "2026-03-29T12:00")).len() / SECOND,
            82_800
        );
        assert_eq!(
            c.period(local(B, "2026-10-25T12:00")).len() / SECOND,
            90_000
        );
        assert_eq!(
            c.period(local(B, "2026-06-01T12:00")).len() / SECOND,
            86_400
        );
        // 02:30 does not exist on 2026-03-29: the day starts at 03:00.
        let c = cal(Unit::Day, B, 1, 1, "02:30");
        let p = c.period(local(B, "2026-03-29T12:00"));
        assert_eq!(p.start, local(B, "2026-03-29T03:00"));
        assert_eq!(p.end, local(B, "2026-03-30T02:30"));
        // 02:30 exists twice on 2026-10-25: the earlier one.
        let p = c.period(local(B, "2026-10-25T12:00"));
        let earlier = micros("2026-10-25T00:30:00Z".parse::<Timestamp>().unwrap());
        assert_eq!(p.start, earlier);
    }

    #[test]
    fn tokyo_weeks_from_monday() {
        const T: &str = "Asia/Tokyo";
        let c = cal(Unit::Week, T, 1, 1, "00:00");
        // 2026-11-26 is a Thursday.
        let p = c.period(local(T, "2026-11-26T09:00"));
        assert_eq!(p.start, local(T, "2026-11-23T00:00"));
        assert_eq!(p.end, local(T, "2026-11-30T00:00"));
        assert_eq!(p.len() / SECOND, 7 * 86_400);
        // Monday 00:00 local is a new week; Sunday 23:59:59 is not.
        assert_eq!(c.period(local(T, "2026-11-30T00:00")).start, p.end);
        assert_eq!(c.period(local(T, "2026-11-29T23:59:59")).start, p.start);
        // The same instant in UTC is still Wednesday there (15:00 UTC).
        let sunday = Calendar::new(Unit::Week, T, 1, 1, Weekday::Sunday, "00:00").unwrap();
        assert_eq!(
            sunday.period(local(T, "2026-11-26T09:00")).start,
            local(T, "2026-11-22T00:00")
        );
    }

    #[test]
    fn years_anchored_on_february_29() {
        let c = cal(Unit::Year, "UTC", 29, 2, "00:00");
        let p = c.period(local("UTC", "2027-06-01T00:00"));
        assert_eq!(p.start, local("UTC", "2027-02-28T00:00"));
        assert_eq!(p.end, local("UTC", "2028-02-29T00:00"));
        let p = c.period(local("UTC", "2028-02-28T12:00"));
        assert_eq!(p.start, local("UTC", "2027-02-28T00:00"));
        let p = c.period(local("UTC", "2028-03-01T00:00"));
        assert_eq!(p.start, local("UTC", "2028-02-29T00:00"));
        assert_eq!(p.end, local("UTC", "2029-02-28T00:00"));
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        let e = |r: Result<Calendar, String>| r.unwrap_err();
        assert!(e(Calendar::new(
            Unit::Day,
            "Mars/Olympus",
            1,
            1,
            Weekday::Monday,
            "00:00"
        ))
        .contains("unknown time zone"));
        assert!(e(Calendar::new(
            Unit::Month,
            "UTC",
            0,
            1,
            Weekday::Monday,
            "00:00"
        ))
        .contains("anchor_day"));
        assert!(e(Calendar::new(
            Unit::Year,
            "UTC",
            1,
            13,
            Weekday::Monday,
            "00:00"
        ))
        .contains("anchor_month"));
        assert!(e(Calendar::new(
            Unit::Day,
            "UTC",
            1,
            1,
            Weekday::Monday,
            "25:00"
        ))
        .contains("anchor_time"));
    }

    #[test]
    fn every_instant_lies_in_its_period() {
        // A sweep over two years of New York and Berlin, hour by hour:
        // start <= now < end, and consecutive periods touch.
        for (tz, unit, day) in [
            (NY, Unit::Month, 31),
            ("Europe/Berlin", Unit::Day, 1),
            ("Australia/Lord_Howe", Unit::Week, 1),
        ] {
            let c = cal(unit, tz, day, 1, "02:30");
            let mut now = local("UTC", "2026-01-01T00:00");
            let stop = local("UTC", "2028-01-01T00:00");
            let mut last: Option<Period> = None;
            while now < stop {
                let p = c.period(now);
                assert!(p.start <= now && now < p.end, "{tz} {now}: {p:?}");
                if let Some(l) = last.filter(|l| *l != p) {
                    assert_eq!(l.end, p.start, "{tz}: periods touch");
                }
                last = Some(p);
                now += 3600 * SECOND;
            }
        }
    }
}
