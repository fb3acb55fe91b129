//! Per-key limits as configured (docs/configuration/quotas.md): which of a
//! limit's `limit`, `rate` or `burst` each key may have of its own, and
//! where that value comes from.

/// Where a key's own value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueSource {
    /// `from: store`: set through the admin API (`PUT /quotas/...`), kept
    /// beside the key's counters, read in the decision's own store call.
    Store,
    /// `from: attr:NAME`: the verified consumer's attribute.
    Attr(String),
}

/// The values of a limit that keys may have of their own (at least one);
/// the limit's parameters hold the defaults. All come from one place: the
/// store, or attributes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PerKeyLimits {
    /// `limit: { default, from }`.
    pub limit: Option<ValueSource>,
    /// `rate: { default, from }`.
    pub rate: Option<ValueSource>,
    /// `burst: { default, from }`.
    pub burst: Option<ValueSource>,
}

impl PerKeyLimits {
    /// Whether the values live in the store (else in attributes).
    pub fn in_store(&self) -> bool {
        [&self.limit, &self.rate, &self.burst]
            .into_iter()
            .any(|s| *s == Some(ValueSource::Store))
    }

    /// The names of the per-key values (`limit`, `rate`, `burst`).
    pub fn names(&self) -> Vec<&'static str> {
        [
            ("limit", &self.limit),
            ("rate", &self.rate),
            ("burst", &self.burst),
        ]
        .into_iter()
        .filter_map(|(n, s)| s.is_some().then_some(n))
        .collect()
    }
}
