//! Packing past trail days (sql/V0014): one day at a time, on a
//! connection of its own, so batches never wait for it; a day that fails
//! is tried again after a back-off while later days go on.

use std::time::{Duration, Instant};

use tidemark_store::StoreError;

use super::Process;
use crate::core::days;
use crate::store;

/// A trail day is packed this long after it ends (sql/V0014): late events
/// after that stay one row each.
const PACK_AFTER: i64 = days::HOUR_MS;
/// The first and the longest wait before a failed packing is tried again.
const PACK_RETRY: Duration = Duration::from_secs(5);
const PACK_RETRY_MAX: Duration = Duration::from_secs(600);

/// A packing's outcome and duration.
pub(crate) type Packed = (Result<Option<i64>, StoreError>, Duration);

impl Process<'_> {
    /// Hears how the packing under way ended, and starts the next: the
    /// oldest trail day `PACK_AFTER` past its end (late events written after
    /// it stay unpacked, and are read all the same), while no batch is
    /// waiting. One at a time, on its own connection, so batches never wait
    /// for it; a day that fails is tried again after a back-off (5 s,
    /// doubling to 10 min) while later days go on.
    pub(super) async fn pack(&mut self, clock: i64, horizon: i64) {
        if self.packing.as_ref().is_some_and(|(_, h)| h.is_finished()) {
            let (p, h) = self.packing.take().expect("checked");
            let days::Part::Span(from, to) = p else {
                return;
            };
            let failed = match h.await {
                Ok((Ok(events), took)) => {
                    self.packed.insert(from);
                    self.pack_retry.remove(&from);
                    tracing::info!(from, to, ?events, ?took, "trail day packed");
                    None
                }
                Ok((Err(e), _)) => Some(e.to_string()),
                Err(e) => Some(e.to_string()),
            };
            if let Some(error) = failed {
                let now = Instant::now();
                let wait = self
                    .pack_retry
                    .get(&from)
                    .map_or(PACK_RETRY, |(_, w)| (*w * 2).min(PACK_RETRY_MAX));
                self.pack_retry.insert(from, (now + wait, wait));
                tracing::warn!(
                    from,
                    to,
                    error,
                    ?wait,
                    "packing a trail day failed; tried again later"
                );
            }
        }
        if self.packing.is_some() || self.batch_full() {
            return;
        }
        let now = Instant::now();
        let (packed, retry) = (&self.packed, &self.pack_retry);
        let skip =
            |from: i64| packed.contains(&from) || retry.get(&from).is_some_and(|(at, _)| *at > now);
        let Some(p) = self.trail_days.to_pack(clock, PACK_AFTER, horizon, skip) else {
            return;
        };
        let url = self.url.to_owned();
        let name = format!("tidemark profiles {}: packer", self.config.name);
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let r = async {
                let mut c = store::packer(&url, &name).await?;
                let events = store::pack_trail(&mut c, p).await?;
                store::tidy_trail(&c, p).await?;
                Ok(events)
            };
            (r.await, started.elapsed())
        });
        self.packing = Some((p, task));
    }
}
