//! The synthetic bidder's read path (`PublishOptions::profiles`): before a
//! batch of bids goes out, its persons' counters are read from the profile
//! database in one round trip, as a bidder reads them, and added to the
//! bids' features. The reads run on a current-thread runtime of their own:
//! the publisher itself is a plain thread that blocks on its socket.

use super::{PublishError, PublishOptions};
use crate::market::Out;
use tidemark_reader::ProfileRate;

/// The bidder's read path: the counters of a batch's persons, in one round trip.
pub(super) struct ProfileReads {
    rt: tokio::runtime::Runtime,
    pub(super) reader: tidemark_reader::Reader,
    /// Reads done, and bids that got counters.
    reads: u64,
    /// What goes into a bid (`PublishOptions::profile_person`, `profile_counters`, `profile_rates`).
    person: bool,
    counters: bool,
    rates: Vec<ProfileRate>,
}

impl ProfileReads {
    pub(super) fn open(opts: &PublishOptions, url: &str) -> Result<ProfileReads, PublishError> {
        let mut names: Vec<&str> = opts.profile_rates.iter().map(|r| r.name.as_str()).collect();
        if opts.profile_person {
            names.push("person");
        }
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(PublishError::Profiles(format!(
                "two features of the bid's profile are named {:?}",
                w[0]
            )));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| PublishError::Profiles(e.to_string()))?;
        let replicas: Vec<&str> = opts.profile_replicas.iter().map(String::as_str).collect();
        let reader = tidemark_reader::Reader::new(url, 1)
            .and_then(|r| r.with_replicas(&replicas, opts.max_lag))
            .map_err(|e| PublishError::Profiles(e.to_string()))?;
        Ok(ProfileReads {
            rt,
            reader,
            reads: 0,
            person: opts.profile_person,
            counters: opts.profile_counters,
            rates: opts.profile_rates.clone(),
        })
    }

    /// Adds to each bid's features what it takes from its person's profile
    /// (the counters, at the bid's own time; the person; rates derived
    /// from the counters); `at` is the batch's read time.
    pub(super) fn enrich(&mut self, batch: &mut [Out], at: i64) -> Result<(), PublishError> {
        let users: Vec<String> = batch
            .iter()
            .filter(|o| o.features_end.is_some())
            .filter(|o| o.person.is_some())
            .map(|o| format!("user:{}", o.user))
            .collect();
        if users.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = users.iter().map(String::as_str).collect();
        let profiles = self
            .rt
            .block_on(self.reader.get(&ids, at))
            .map_err(|e| PublishError::Profiles(e.to_string()))?;
        self.reads += 1;
        let mut profiles = profiles.into_iter();
        for o in batch
            .iter_mut()
            .filter(|o| o.features_end.is_some() && o.person.is_some())
        {
            let p = profiles.next().expect("one profile per identifier asked");
            let counters = p.counters_at(o.ts);
            if self.counters {
                for (name, value) in &counters {
                    o.add_feature(name, *value);
                }
            }
            for r in &self.rates {
                // From the counters just decayed, not decayed again.
                match r.of(&counters) {
                    Some(v) if !(self.counters && counters.iter().any(|(n, _)| *n == r.name)) => {
                        o.add_feature(&r.name, v);
                    }
                    // No definitions yet (the profile process is starting):
                    // nothing, as for the counters.
                    None if counters.is_empty() => {}
                    _ => return Err(PublishError::Profiles(rate_misfit(r, &counters))),
                }
            }
            if self.person {
                o.add_text_feature("person", &p.master);
            }
        }
        Ok(())
    }

    /// Logs how many reads were done and how long a lookup took.
    pub(super) fn log_summary(&self) {
        let h = self.reader.lookup_times();
        let ms = |q| h.quantile_bound(q).map_or(0.0, |b| b * 1000.0);
        tracing::info!(
            reads = self.reads,
            mean_ms = h.sum * 1000.0 / h.count.max(1) as f64,
            p50_under_ms = ms(0.5),
            p99_under_ms = ms(0.99),
            "read bids' persons from the profile database"
        );
    }
}

/// Why `rate` cannot go into bids whose profiles define `counters`.
fn rate_misfit(rate: &ProfileRate, counters: &[(&str, f64)]) -> String {
    let names: Vec<&str> = counters.iter().map(|(n, _)| *n).collect();
    match [&rate.clicks, &rate.views].into_iter().find(|c| !names.contains(&c.as_str())) {
        Some(missing) => format!(
            "--profile-rate {rate}: the profile database defines no counter {missing:?} (it defines {names:?})"
        ),
        None => format!("--profile-rate {rate}: a counter already goes into bids as {:?}", rate.name),
    }
}
