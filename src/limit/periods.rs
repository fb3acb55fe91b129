//! A calendar window's periods, per request (docs/configuration/quotas.md):
//! the rule of the limit, or of the consumer when its zone or anchor day
//! comes from an attribute, with the current period's bounds cached until
//! it ends.

use std::collections::HashMap;
use std::sync::Mutex;

use tollgate_limit::algorithm::fixed_window::Window;
use tollgate_limit::calendar::Calendar;
use tollgate_limit::Micros;

use super::key::Consumer;
use crate::config::CalendarWindow;

/// The most distinct (zone, anchor day) rules kept for attribute-driven
/// windows; the map starts over when it is full.
const MAX_RULES: usize = 1024;

/// One rule and the window it last computed.
#[derive(Debug)]
struct Rule {
    calendar: Calendar,
    cached: Option<Window>,
}

impl Rule {
    fn new(calendar: Calendar) -> Rule {
        Rule {
            calendar,
            cached: None,
        }
    }

    /// The window holding `now`, computed at most once per period.
    fn window(&mut self, now: Micros) -> Window {
        if let Some(w @ Window::Calendar { start, end, .. }) = self.cached {
            if (start..end).contains(&now) {
                return w;
            }
        }
        let w = self.calendar.window(now);
        self.cached = Some(w);
        w
    }
}

/// A limit's calendar window, compiled.
#[derive(Debug)]
pub struct Periods {
    config: CalendarWindow,
    /// The rule with the written values (and the attributes' defaults).
    default: Mutex<Rule>,
    /// Rules per (zone, anchor day) read from consumers' attributes.
    consumers: Mutex<HashMap<(String, u8), Rule>>,
}

impl Periods {
    /// The periods of `config`.
    pub fn new(config: &CalendarWindow) -> Periods {
        Periods {
            default: Mutex::new(Rule::new(config.default.clone())),
            config: config.clone(),
            consumers: Mutex::new(HashMap::new()),
        }
    }

    /// The window for a request at `now` by `consumer` (if verified): the
    /// period holding `now` and the next one's end.
    pub fn window(&self, now: Micros, consumer: Option<&dyn Consumer>) -> Window {
        if self.config.per_consumer() {
            if let Some(consumer) = consumer {
                let (tz, day) = self.config.resolve(|name| consumer.attr(name));
                if let Some(w) = self.consumer_window(tz, day, now) {
                    return w;
                }
            }
        }
        lock(&self.default).window(now)
    }

    /// The window of the rule (`tz`, `day`), or `None` when the consumer's
    /// zone is not one (the default rule applies).
    fn consumer_window(&self, tz: &str, day: u8, now: Micros) -> Option<Window> {
        let mut rules = lock(&self.consumers);
        if let Some(rule) = rules.get_mut(&(tz.to_owned(), day)) {
            return Some(rule.window(now));
        }
        let calendar = self.config.with(tz, day).ok()?;
        if rules.len() >= MAX_RULES {
            rules.clear();
        }
        let rule = rules
            .entry((tz.to_owned(), day))
            .or_insert_with(|| Rule::new(calendar));
        Some(rule.window(now))
    }
}

/// The guarded value, whether or not a holder panicked (the rules stay
/// valid either way).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
