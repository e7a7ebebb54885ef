//! What the market knows and the shards never see: for every transaction that
//! won an impression, the true probability of each default target's label
//! (SPEC 5) given its features, its person and when its events happened, and
//! the delays drawn. The demo scores its learner against this floor.
//!
//! A target's truth is the model's probability that the label is 1 given
//! what came before it: the click model's probability times the chance the
//! exponential delay lands in the window (from the impression's time), and
//! for installs, given the click's time, the share of the install delay's
//! distribution in each window. The install delay is a mixture of
//! exponentials (`crate::delays`), so each install figure is its
//! components' exponential figures here, weighted; the shift, where it
//! applies, is in the propensity and the delay the market hands in.

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
    /// P(a click in the click window, then an install by the end of the long
    /// window | impression): what a bidder prices as
    /// `ctr × (cvr_short + cvr_long)`, known for every impression.
    pub p_install: f64,
}

/// The columns `Truth::write_tsv` writes, in order.
pub const TSV_HEADER: &str =
    "txid\tperson\tctr\tcvr_short\tcvr_long\tclick_delay_ms\tinstall_delay_ms\tp_install";

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
            "{}\t{}\t{:.9}\t{s}\t{l}\t{}\t{}\t{:.9}",
            self.txid,
            self.person.map(|p| p.to_string()).unwrap_or_default(),
            self.ctr,
            opt(self.click_delay_ms),
            opt(self.install_delay_ms),
            self.p_install,
        );
    }
}

/// P(a click delay of mean `click_mean` lands within `click_by`, and then an
/// install delay of mean `install_mean` within `install_by`), both times from
/// the impression, `install_by ≥ click_by`: the integral over the click's
/// time `t` of `a·e^(−a·t) · (1 − e^(−b·(install_by − t)))` with `a`, `b` the
/// rates, written with non-positive exponents only.
pub fn click_then_install(
    click_mean: f64,
    click_by: f64,
    install_mean: f64,
    install_by: f64,
) -> f64 {
    if click_by <= 0.0 {
        return 0.0;
    }
    let (a, b) = (1.0 / click_mean, 1.0 / install_mean);
    let clicked = 1.0 - (-a * click_by).exp();
    let late = if (a - b).abs() < 1e-15 {
        a * click_by * (-b * install_by).exp()
    } else {
        a / (b - a)
            * ((-a * click_by - b * (install_by - click_by)).exp() - (-b * install_by).exp())
    };
    (clicked - late).max(0.0)
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
    fn click_then_install_is_the_integral_it_claims() {
        // Midpoint rule over the click's time, against the closed form.
        let (cm, cb, im, ib) = (15_000.0, 300_000.0, 260_000.0, 1_800_000.0);
        let steps = 200_000;
        let dt = cb / f64::from(steps);
        let numeric: f64 = (0..steps)
            .map(|i| {
                let t = (f64::from(i) + 0.5) * dt;
                (-t / cm).exp() / cm * (1.0 - (-(ib - t) / im).exp()) * dt
            })
            .sum();
        let closed = click_then_install(cm, cb, im, ib);
        assert!((numeric - closed).abs() < 1e-6, "{numeric} vs {closed}");
        // Equal rates take the limit's form; no click window, no install.
        let eq = click_then_install(1000.0, 500.0, 1000.0, 2000.0);
        let near = click_then_install(1000.0, 500.0, 1_000.000_1, 2000.0);
        assert!((eq - near).abs() < 1e-6);
        assert_eq!(click_then_install(1000.0, 0.0, 10.0, 10.0), 0.0);
        assert!(click_then_install(1.0, 1e9, 1.0, 1e9) > 0.999_999);
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
            p_install: 0.125,
        };
        let mut s = String::new();
        t.write_tsv(&mut s);
        let cols: Vec<&str> = s.split('\t').collect();
        assert_eq!(cols.len(), TSV_HEADER.split('\t').count());
        assert_eq!(
            cols[1..],
            ["", "0.250000000", "", "", "12", "", "0.125000000"]
        );
    }
}
