//! The databases the online learner reads: a small connection pool per
//! source (its shards' streams are read concurrently) and back-off while a
//! source is away, so the others go on.

use std::time::{Duration, Instant};

use tidemark_store::{Pool, PooledClient, StoreError};

use crate::Source;

/// Connections to one source database, or when to try again.
pub(crate) struct SourceDb {
    pub(crate) source: Source,
    pool: Pool,
    migrated: bool,
    retry_at: Option<Instant>,
    wait: Duration,
}

/// Connections per source: one per shard stream read at once.
const POOL_SIZE: usize = 4;

impl SourceDb {
    /// A pool for `source`, which must name its database; nothing is
    /// connected until it is used.
    pub(crate) fn new(source: &Source) -> Result<SourceDb, StoreError> {
        let url = source.database_url.as_deref().ok_or_else(|| {
            StoreError::Url(format!("source {:?} names no database_url", source.name))
        })?;
        Ok(SourceDb {
            source: source.clone(),
            pool: tidemark_store::pool(url, POOL_SIZE)?,
            migrated: false,
            retry_at: None,
            wait: Duration::from_millis(100),
        })
    }

    /// A connection, or `None` while the source is away (retried with
    /// back-off). The schema is brought up to date on first contact.
    pub(crate) async fn client(&mut self) -> Option<PooledClient> {
        if self.retry_at.is_some_and(|t| Instant::now() < t) {
            return None;
        }
        let got = async {
            let mut c = self.pool.get().await?;
            if !self.migrated {
                tidemark_store::migrate(&mut c).await?;
            }
            Ok::<_, StoreError>(c)
        }
        .await;
        match got {
            Ok(c) => {
                if self.retry_at.take().is_some() {
                    tracing::info!(source = self.source.name, "database is back");
                }
                self.migrated = true;
                self.wait = Duration::from_millis(100);
                Some(c)
            }
            Err(e) => {
                self.failed(&e);
                None
            }
        }
    }

    /// Drops every connection (a hung one would be handed out again) and
    /// opens new ones when next asked.
    pub(crate) fn reset(&mut self) {
        if let Some(url) = self.source.database_url.as_deref() {
            if let Ok(pool) = tidemark_store::pool(url, POOL_SIZE) {
                self.pool = pool;
            }
        }
    }

    /// Another connection for a concurrent read, once `client` has succeeded.
    pub(crate) async fn another(&self) -> Result<PooledClient, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Backs off after an error: 100 ms doubling to 10 s.
    pub(crate) fn failed(&mut self, e: &StoreError) {
        tracing::warn!(
            source = self.source.name,
            "database error, retrying in {:.1}s: {e}",
            self.wait.as_secs_f64()
        );
        self.retry_at = Some(Instant::now() + self.wait);
        self.wait = (self.wait * 2).min(Duration::from_secs(10));
    }
}
