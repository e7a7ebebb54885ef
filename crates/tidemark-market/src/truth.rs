//! What the market knows and the shards never see: for every transaction that
//! won an impression, the true probability of each default target's label
//! (SPEC 5) given its features, its person and when its events happened, and
//! the delays drawn. The demo scores its learner against this floor.
//!
//! A target's truth is the model's probability that the label is 1 given
//! what came before it: the click model's probability times the chance the
//! exponential delay lands in the window (from the impression's time), and
//! for installs, given the click's time, the share of the install delay's
//! distribution in each window.

use std::fmt::Write as _;

use tidemark_wire::Txid;

/// The truth about one transaction with an impression.
#[derive(Debug, Clone, PartialEq)]
pub struct Truth {
    /// Its transaction.
    pub txid: Txid,
    /// The true person behind it, if persons are on.
    pub person: Option<u32>,
    /// P(click in the click window | impression).
    pub ctr: f64,
    /// Given a click in the click window: P(install in the short window) and
    /// P(install in the long window after the short one).
    pub cvr: Option<(f64, f64)>,
    /// Event time from creation to the click and to the install, when drawn
    /// (they may fall outside every window).
    pub click_delay_ms: Option<i64>,
    /// See `click_delay_ms`.
    pub install_delay_ms: Option<i64>,
}

/// The columns `Truth::write_tsv` writes, in order.
pub const TSV_HEADER: &str =
    "txid\tperson\tctr\tcvr_short\tcvr_long\tclick_delay_ms\tinstall_delay_ms";

impl Truth {
    /// One tab-separated line (no newline), empty where a value is absent.
    pub fn write_tsv(&self, out: &mut String) {
        let opt = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
        let (s, l) = match self.cvr {
            Some((s, l)) => (format!("{s:.9}"), format!("{l:.9}")),
            None => (String::new(), String::new()),
        };
        let _ = write!(
            out,
            "{}\t{}\t{:.9}\t{s}\t{l}\t{}\t{}",
            self.txid,
            self.person.map(|p| p.to_string()).unwrap_or_default(),
            self.ctr,
            opt(self.click_delay_ms),
            opt(self.install_delay_ms),
        );
    }
}

/// P(an exponential delay of mean `mean` from `from` lands at or before `until`).
pub fn within(mean: f64, from: i64, until: i64) -> f64 {
    if until < from {
        return 0.0;
    }
    1.0 - (-((until - from) as f64) / mean).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exponential_delay_lands_in_a_window_as_its_distribution_says() {
        assert_eq!(within(100.0, 50, 40), 0.0);
        assert_eq!(within(100.0, 50, 50), 0.0);
        assert!((within(100.0, 0, 100) - (1.0 - (-1.0f64).exp())).abs() < 1e-12);
        assert!(within(100.0, 0, 1_000_000) > 0.999_999);
    }

    #[test]
    fn a_line_has_every_column_and_empty_absent_values() {
        let t = Truth {
            txid: Txid::new(7, 1_700_000_000_000),
            person: None,
            ctr: 0.25,
            cvr: None,
            click_delay_ms: Some(12),
            install_delay_ms: None,
        };
        let mut s = String::new();
        t.write_tsv(&mut s);
        let cols: Vec<&str> = s.split('\t').collect();
        assert_eq!(cols.len(), TSV_HEADER.split('\t').count());
        assert_eq!(cols[1..], ["", "0.250000000", "", "", "12", ""]);
    }
}
