//! A rate a bidder derives from two profile counters (`tidemark publish
//! --profile-rate`).
//!
//! A linear model given a person's decayed counts extrapolates activity:
//! how often a person is seen says little of how often they click, and a
//! count of 400 is not 40 times a count of 10. What the counters know that
//! the person's own weight learns only slowly is the person's recent rate,
//! so the bidder sends that, smoothed towards a prior and on the logit
//! scale a logistic model adds.

use std::fmt;

/// Views of prior evidence every rate is smoothed with: a person seen
/// a few times stays near the prior, one seen hundreds of times is their own.
pub const PRIOR_VIEWS: f64 = 10.0;

/// `NAME=CLICKS/VIEWS@PRIOR`: the feature `NAME` is
/// `logit((CLICKS + PRIOR_VIEWS × PRIOR) / (VIEWS + PRIOR_VIEWS))`, from the
/// person's counters `CLICKS` and `VIEWS` at the bid's time.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRate {
    /// The feature's name in the bid.
    pub name: String,
    /// The counter of successes (clicks).
    pub clicks: String,
    /// The counter of trials (impressions).
    pub views: String,
    /// The rate of a person never seen, in (0, 1).
    pub prior: f64,
}

impl ProfileRate {
    /// Parses `NAME=CLICKS/VIEWS@PRIOR`.
    pub fn parse(text: &str) -> Result<ProfileRate, String> {
        let form =
            || format!("{text:?}: expected NAME=CLICKS/VIEWS@PRIOR, e.g. ctr_1h=clk_1h/imp_1h@0.1");
        let (name, rest) = text.split_once('=').ok_or_else(form)?;
        let (counters, prior) = rest.split_once('@').ok_or_else(form)?;
        let (clicks, views) = counters.split_once('/').ok_or_else(form)?;
        let prior: f64 = prior.trim().parse().map_err(|_| form())?;
        if !(prior > 0.0 && prior < 1.0) {
            return Err(format!(
                "{text:?}: the prior is a rate strictly between 0 and 1"
            ));
        }
        let [name, clicks, views] = [name, clicks, views].map(|s| s.trim().to_owned());
        if [&name, &clicks, &views].iter().any(|s| s.is_empty()) {
            return Err(form());
        }
        // Written into bids as a JSON key: nothing to escape.
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "{text:?}: a rate's name is letters, digits and underscores"
            ));
        }
        Ok(ProfileRate {
            name,
            clicks,
            views,
            prior,
        })
    }

    /// The feature's value for these counts: clicks are capped at views
    /// (counters of unequal half-lives can hold more), negative counts read
    /// as 0; finite whatever the counts (infinite ones included).
    pub fn value(&self, clicks: f64, views: f64) -> f64 {
        let v = views.max(0.0);
        let c = clicks.max(0.0).min(v);
        let q = (c + PRIOR_VIEWS * self.prior) / (v + PRIOR_VIEWS);
        // Rounding at the largest counts can reach 0 or 1.
        let q = if q.is_finite() {
            q.clamp(1e-12, 1.0 - 1e-12)
        } else {
            self.prior
        };
        (q / (1.0 - q)).ln()
    }
}

impl ProfileRate {
    /// Its value from a profile's counters at one time
    /// (`Profile::counters_at`); `None` when one of its counters is not
    /// among them.
    pub fn of(&self, counters: &[(&str, f64)]) -> Option<f64> {
        let count = |name: &str| counters.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        Some(self.value(count(&self.clicks)?, count(&self.views)?))
    }
}

impl fmt::Display for ProfileRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={}/{}@{}",
            self.name, self.clicks, self.views, self.prior
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate() -> ProfileRate {
        ProfileRate::parse("ctr_1h = clk_1h/imp_1h@0.1").unwrap()
    }

    #[test]
    fn parses_and_prints_back() {
        let r = rate();
        assert_eq!(
            (r.name.as_str(), r.clicks.as_str(), r.views.as_str()),
            ("ctr_1h", "clk_1h", "imp_1h")
        );
        assert_eq!(r.prior, 0.1);
        assert_eq!(ProfileRate::parse(&r.to_string()).unwrap(), r);
        for bad in [
            "ctr",
            "a=b/c",
            "a=b@0.1",
            "=b/c@0.1",
            "a=/c@0.1",
            "a=b/c@1",
            "a=b/c@0",
            "a=b/c@x",
            "a=b/c@NaN",
        ] {
            assert!(ProfileRate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_person_never_seen_is_the_prior_and_a_busy_one_their_own_rate() {
        let r = rate();
        let logit = |p: f64| (p / (1.0 - p)).ln();
        assert!((r.value(0.0, 0.0) - logit(0.1)).abs() < 1e-12);
        // 1 click in 10 views, smoothed with 10 views at 0.1: 2/20.
        assert!((r.value(1.0, 10.0) - logit(0.1)).abs() < 1e-12);
        assert!((r.value(3000.0, 10_000.0) - logit(3001.0 / 10_010.0)).abs() < 1e-12);
        // More clicks than views (counters of unequal half-lives): all clicked.
        assert!((r.value(30.0, 10.0) - logit(11.0 / 20.0)).abs() < 1e-12);
        let inf = f64::INFINITY;
        for (c, v) in [
            (-1.0, -5.0),
            (1e300, 0.0),
            (0.0, 1e300),
            (f64::MAX, f64::MAX),
            (inf, inf),
            (inf, 3.0),
            (1.0, inf),
            (f64::NAN, 4.0),
        ] {
            assert!(r.value(c, v).is_finite(), "{c} {v}");
        }
        assert!(ProfileRate::parse(r#"a"b=c/d@0.1"#).is_err());
    }
}
