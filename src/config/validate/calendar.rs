//! `window: { calendar: ... }` on a `fixed_window` limit: the unit, zone and
//! anchors checked field by field, each error at its own field.

use tollgate_limit::calendar::{self, Unit, Weekday};

use super::{Ctx, Result};
use crate::config::calendar::{CalendarWindow, FromAttr, DEFAULT_ANCHOR_DAY, DEFAULT_TZ};
use crate::config::model::KeySource;
use crate::config::raw::{NumberOrWord, RawCalendar};

impl Ctx<'_> {
    /// The calendar window written at `path` (the limit's `window`).
    pub(super) fn calendar(&self, path: &str, raw: &RawCalendar) -> Result<CalendarWindow> {
        let field = |name: &str| format!("{path}.{name}");
        let unit: Unit = raw
            .calendar
            .parse()
            .map_err(|e: String| self.err(&field("calendar"), e))?;
        let only = |name: &str, given: bool, units: &[Unit], which: &str| {
            if given && !units.contains(&unit) {
                Err(self.err(
                    &field(name),
                    format!(
                        "{name} applies to {which} periods, not to `calendar: {}`",
                        unit.name()
                    ),
                ))
            } else {
                Ok(())
            }
        };
        only(
            "anchor_day",
            raw.anchor_day.is_some(),
            &[Unit::Month, Unit::Year],
            "month and year",
        )?;
        only(
            "anchor_month",
            raw.anchor_month.is_some(),
            &[Unit::Year],
            "year",
        )?;
        only(
            "week_start",
            raw.week_start.is_some(),
            &[Unit::Week],
            "week",
        )?;

        let tz = self.zone(&field("tz"), raw.tz.as_deref())?;
        let anchor_day = self.anchor_day(&field("anchor_day"), raw.anchor_day.as_ref())?;
        let anchor_month = match raw.anchor_month {
            None => 1,
            Some(m) if (1..=12).contains(&m) => m,
            Some(m) => {
                return Err(self.err(
                    &field("anchor_month"),
                    format!("anchor_month is 1 to 12, got {m}"),
                ))
            }
        };
        let week_start = match raw.week_start.as_deref() {
            None => Weekday::Monday,
            Some(day) => calendar::weekday(day).map_err(|e| self.err(&field("week_start"), e))?,
        };
        let anchor_time = raw
            .anchor_time
            .clone()
            .unwrap_or_else(|| "00:00".to_owned());
        let mut window = CalendarWindow {
            unit,
            tz,
            anchor_day,
            anchor_month,
            week_start,
            anchor_time,
            default: calendar::Calendar::new(Unit::Day, DEFAULT_TZ, 1, 1, Weekday::Monday, "00:00")
                .expect("the defaults are valid"),
        };
        let (tz, day) = window.resolve(|_| None);
        window.default = window
            .with(tz, day)
            .map_err(|e| self.err(&field("anchor_time"), e))?;
        Ok(window)
    }

    /// `tz`: an IANA zone (default UTC) or `attr:NAME`.
    fn zone(&self, field: &str, written: Option<&str>) -> Result<FromAttr<String>> {
        let Some(text) = written else {
            return Ok(FromAttr::Value(DEFAULT_TZ.to_owned()));
        };
        match self.attr(field, text)? {
            Some(name) => Ok(FromAttr::Attr(name)),
            None if calendar::is_time_zone(text) => Ok(FromAttr::Value(text.to_owned())),
            None => Err(self.err(
                field,
                format!(
                    "unknown time zone \"{text}\" (an IANA name like Europe/Berlin, or attr:NAME)"
                ),
            )),
        }
    }

    /// `anchor_day`: 1 to 31 (default 1) or `attr:NAME`.
    fn anchor_day(&self, field: &str, written: Option<&NumberOrWord>) -> Result<FromAttr<u8>> {
        match written {
            None => Ok(FromAttr::Value(DEFAULT_ANCHOR_DAY)),
            Some(NumberOrWord::Number(d)) if (1..=31).contains(d) => Ok(FromAttr::Value(*d as u8)),
            Some(NumberOrWord::Word(text)) if self.attr(field, text)?.is_some() => {
                Ok(FromAttr::Attr(text["attr:".len()..].to_owned()))
            }
            Some(other) => {
                let shown = match other {
                    NumberOrWord::Number(d) => d.to_string(),
                    NumberOrWord::Word(t) => format!("\"{t}\""),
                };
                Err(self.err(
                    field,
                    format!("anchor_day is a day of the month (1 to 31) or attr:NAME, got {shown}"),
                ))
            }
        }
    }

    /// `Some(NAME)` when `text` is `attr:NAME` (which needs `consumers:`),
    /// `None` when it is a plain value.
    fn attr(&self, field: &str, text: &str) -> Result<Option<String>> {
        let Some(name) = text.strip_prefix("attr:") else {
            return Ok(None);
        };
        if name.is_empty() {
            return Err(self.err(field, "attr: needs an attribute name (attr:NAME)"));
        }
        self.identity_source(field, &KeySource::Attr(name.to_owned()))?;
        Ok(Some(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use tollgate_limit::algorithm::fixed_window::Window;
    use tollgate_limit::algorithm::SECOND;
    use tollgate_limit::calendar::Unit;
    use tollgate_limit::AlgoParams;

    use crate::config::{parse, CalendarWindow, FromAttr};

    const KEY: &str = "sha256:3eb1bd439947eb762998e566ccc2e099c791118b2f40579cc4f7da2b5061b7f9";

    fn limit(window: &str, consumers: bool) -> String {
        let head = if consumers {
            format!("consumers:\n  api_keys: {{ header: x-api-key }}\n  list:\n    - {{ name: a, keys: [\"{KEY}\"] }}\n")
        } else {
            String::new()
        };
        format!("{head}limits:\n  q:\n    algorithm: fixed_window\n    limit: 10\n    window: {window}\n")
    }

    fn calendar(window: &str, consumers: bool) -> CalendarWindow {
        let loaded =
            parse(&limit(window, consumers), "gateway.yaml").unwrap_or_else(|e| panic!("{e}"));
        let l = &loaded.config.limits[0];
        assert!(matches!(
            &l.params,
            AlgoParams::FixedWindow(p) if matches!(p.window(), Window::Calendar { .. })
        ));
        l.calendar.clone().expect("a calendar window")
    }

    fn error(window: &str, consumers: bool) -> (String, Option<usize>, String) {
        match parse(&limit(window, consumers), "gateway.yaml") {
            Ok(_) => panic!("valid: {window}"),
            Err(e) => (e.field, e.line, e.message),
        }
    }

    #[test]
    fn calendar_windows_with_their_defaults() {
        let c = calendar(
            "{ calendar: month, tz: America/New_York, anchor_day: 15, anchor_time: \"09:30\" }",
            false,
        );
        assert_eq!(c.unit, Unit::Month);
        assert_eq!(c.tz, FromAttr::Value("America/New_York".into()));
        assert_eq!(c.anchor_day, FromAttr::Value(15));
        assert_eq!(c.anchor_time, "09:30");
        let c = calendar("{ calendar: day }", false);
        assert_eq!(
            (c.tz, c.anchor_day),
            (FromAttr::Value("UTC".into()), FromAttr::Value(1))
        );
        let p = c.default.period(1_700_000_000 * SECOND);
        assert_eq!(p.len(), 86_400 * SECOND);
        let c = calendar(
            "{ calendar: month, tz: \"attr:tz\", anchor_day: \"attr:billing_day\" }",
            true,
        );
        assert_eq!(c.tz, FromAttr::Attr("tz".into()));
        assert_eq!(c.anchor_day, FromAttr::Attr("billing_day".into()));
        assert!(c.per_consumer());
        let c = calendar("{ calendar: week, week_start: Sunday }", false);
        assert_eq!(c.week_start, tollgate_limit::calendar::Weekday::Sunday);
        let c = calendar("{ calendar: year, anchor_month: 2, anchor_day: 29 }", false);
        assert_eq!((c.anchor_month, c.anchor_day), (2, FromAttr::Value(29)));
    }

    #[test]
    fn each_mistake_is_named_at_its_field() {
        let cases: &[(&str, bool, &str, &str)] = &[
            (
                "{ calendar: fortnight }",
                false,
                "limits.q.window.calendar",
                "expected day, week, month or year",
            ),
            (
                "{ calendar: month, tz: Mars/Olympus }",
                false,
                "limits.q.window.tz",
                "unknown time zone \"Mars/Olympus\"",
            ),
            (
                "{ calendar: month, anchor_day: 32 }",
                false,
                "limits.q.window.anchor_day",
                "1 to 31",
            ),
            (
                "{ calendar: month, anchor_day: 0 }",
                false,
                "limits.q.window.anchor_day",
                "1 to 31",
            ),
            (
                "{ calendar: month, anchor_day: fifteenth }",
                false,
                "limits.q.window.anchor_day",
                "got \"fifteenth\"",
            ),
            (
                "{ calendar: day, anchor_day: 3 }",
                false,
                "limits.q.window.anchor_day",
                "applies to month and year periods",
            ),
            (
                "{ calendar: month, anchor_month: 3 }",
                false,
                "limits.q.window.anchor_month",
                "applies to year periods",
            ),
            (
                "{ calendar: year, anchor_month: 13 }",
                false,
                "limits.q.window.anchor_month",
                "1 to 12",
            ),
            (
                "{ calendar: month, week_start: monday }",
                false,
                "limits.q.window.week_start",
                "applies to week periods",
            ),
            (
                "{ calendar: week, week_start: someday }",
                false,
                "limits.q.window.week_start",
                "a weekday",
            ),
            (
                "{ calendar: day, anchor_time: \"25:00\" }",
                false,
                "limits.q.window.anchor_time",
                "anchor_time is \"HH:MM\"",
            ),
            (
                "{ calendar: month, tz: \"attr:tz\" }",
                false,
                "limits.q.window.tz",
                "no `consumers:` section",
            ),
            (
                "{ calendar: month, anchor_day: \"attr:\" }",
                true,
                "limits.q.window.anchor_day",
                "attribute name",
            ),
            (
                "{ calendar: month, every: 2 }",
                false,
                "limits.q.window",
                "unknown field `every`",
            ),
        ];
        for (window, consumers, field, message) in cases {
            let (f, line, m) = error(window, *consumers);
            assert_eq!(&f, field, "{window}: {m}");
            assert!(line.is_some(), "{window}");
            assert!(m.contains(message), "{window}: {m}");
        }
    }

    #[test]
    fn calendars_only_on_fixed_windows_and_never_in_overrides() {
        let text =
            "limits:\n  q: { algorithm: sliding_window, limit: 5, window: { calendar: day } }\n";
        let e = parse(text, "gateway.yaml").unwrap_err();
        assert_eq!(e.field, "limits.q.window");
        assert!(
            e.message.contains("only supported by fixed_window"),
            "{}",
            e.message
        );
        let text = "limits:\n  q: { algorithm: fixed_window, limit: 5, window: { calendar: day }, overrides: [{ match: \"10.0.0.0/8\", window: 1h }] }\n";
        let e = parse(text, "gateway.yaml").unwrap_err();
        assert_eq!(e.field, "limits.q.overrides[0].window");
        let text = "limits:\n  q: { algorithm: fixed_window, limit: 5, window: 1h, overrides: [{ match: \"10.0.0.0/8\", window: { calendar: day } }] }\n";
        let e = parse(text, "gateway.yaml").unwrap_err();
        assert_eq!(e.field, "limits.q.overrides[0].window");
        let text = "limits:\n  q: { algorithm: fixed_window, limit: 5, window: { calendar: day }, overrides: [{ match: \"10.0.0.0/8\", limit: 50 }] }\n";
        let loaded = parse(text, "gateway.yaml").unwrap();
        assert_eq!(
            loaded.config.limits[0].overrides[0].params.capacity(),
            Some(50)
        );
    }
}
