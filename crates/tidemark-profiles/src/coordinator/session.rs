//! The coordinator's connection: opened with the database's profile lock
//! (waiting out a killed predecessor's session, SPEC 12), opened again
//! after a loss, and what it registers and defines (the configuration as
//! registered, the types' and counters' positions).

use std::time::{Duration, Instant};

use tidemark_person::CounterSlot;
use tidemark_store::StoreError;
use tokio_postgres::Client;

use crate::core::{Layout, Pace};
use crate::{store, Config, ProfilesError};

/// Entries of the first link-stage transaction, and the fewest and most one
/// takes ([`Pace`] sizes the rest).
const LINK_START: usize = 500;
const LINK_MIN: usize = 20;
const LINK_MAX: usize = 5_000;

/// How link-stage transactions are paced at first, on any connection.
pub(crate) fn link_pace(config: &Config) -> Pace {
    Pace::new(
        LINK_START,
        LINK_MIN.min(config.transaction_events),
        LINK_MAX.min(config.transaction_events),
    )
}

/// A worker connection's `application_name`.
pub(crate) fn worker_name(process: &str, index: usize) -> String {
    format!("tidemark profiles {process}: worker {index}")
}

/// Connects (as `tidemark profiles NAME: links`), migrates and takes the
/// database's profile lock, waiting up to `grace` for a predecessor's
/// session to let go of it (SPEC 12): a process killed a moment ago leaves
/// its session behind until the server notices.
pub(crate) async fn open_main(
    url: &str,
    name: &str,
    grace: Duration,
) -> Result<Client, ProfilesError> {
    let mut c = store::connect(url, &format!("tidemark profiles {name}: links")).await?;
    tidemark_store::migrate(&mut c).await?;
    let deadline = Instant::now() + grace;
    let mut said = false;
    while !store::try_lock(&c).await? {
        let holder = store::lock_holder(&c).await?;
        let pid = holder.as_ref().map_or(0, |h| h.0);
        if Instant::now() >= deadline {
            return Err(ProfilesError::AlreadyRunning(pid));
        }
        if !said {
            said = true;
            tracing::warn!(
                pid,
                holder = holder.and_then(|h| h.1).unwrap_or_default(),
                "the profile lock is held, perhaps by the session of a predecessor that was \
                 killed: waiting up to lock_grace ({grace:?}) for it to go"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(c)
}

/// Reconnects after the connection was lost; a lock found held is retried
/// for a while ([`tidemark_store::LockGrace`]), the loop hearing a stop.
pub(crate) async fn reopen_main(
    url: &str,
    name: &str,
    grace: &mut tidemark_store::LockGrace,
) -> Result<Client, ProfilesError> {
    match open_main(url, name, Duration::ZERO).await {
        Err(ProfilesError::AlreadyRunning(pid)) => match grace.refused("the profile lock", pid) {
            Some(e) => Err(ProfilesError::Store(e)),
            None => Err(ProfilesError::LockLost),
        },
        Ok(c) => {
            grace.taken();
            // Said once per loss: with a host list this may be another
            // server (docs/operations.md, failover).
            tracing::warn!(
                "the database connection was lost; reconnected, forgetting what was read"
            );
            Ok(c)
        }
        other => other,
    }
}

/// The configuration as registered in `tidemark.profile_process.config`.
pub(crate) fn describe(c: &Config) -> serde_json::Value {
    serde_json::json!({
        "endpoints": c.subscription.endpoints,
        "prefixes": c.subscription.prefixes,
        "rate": c.rate(),
        "clock": if c.subscription.clock == tidemark_intake::ClockKind::Event { "event" } else { "wall" },
        "types": c.types,
        "dedup_ms": c.types.iter().zip(&c.dedup)
            .map(|(t, d)| (t.clone(), serde_json::json!(d.as_millis() as i64)))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
        "trail_ms": c.trail.map(|t| t.as_millis() as i64),
        "workers": c.workers,
        "counters": c.counters.iter().map(|d| serde_json::json!({
            "name": d.name, "event": d.event, "half_life_ms": d.half_life_ms
        })).collect::<Vec<_>>(),
    })
}

/// Checks the configured counters against the stored ones and appends new
/// types and counters; returns where each lives in the arrays.
pub(crate) async fn define(c: &Client, config: &Config) -> Result<Layout, ProfilesError> {
    let (mut types, mut counters) = tidemark_reader::store::definitions(c)
        .await
        .map_err(StoreError::from)?;
    for t in &config.types {
        if !types.iter().any(|(_, n)| n == t) {
            let pos = store::add_type(c, t).await?;
            types.push((pos, t.clone()));
        }
    }
    for d in &config.counters {
        match counters.iter().find(|s| s.1 == d.name) {
            Some((_, _, event, half_life)) => {
                if *event != d.event || *half_life != d.half_life_ms {
                    return Err(ProfilesError::CounterChanged {
                        name: d.name.clone(),
                        stored: format!("event {event:?}, half_life {half_life} ms"),
                        configured: format!("event {:?}, half_life {} ms", d.event, d.half_life_ms),
                    });
                }
            }
            None => {
                let pos = store::add_counter(c, &d.name, &d.event, d.half_life_ms).await?;
                counters.push((pos, d.name.clone(), d.event.clone(), d.half_life_ms));
            }
        }
    }
    let type_pos = config
        .types
        .iter()
        .map(|t| types.iter().find(|(_, n)| n == t).expect("defined above").0)
        .collect();
    counters.sort_by_key(|c| c.0);
    let counters = counters
        .iter()
        .map(|(_, name, event, half_life)| {
            let configured = config.counters.iter().any(|d| &d.name == name);
            let fed_by = types
                .iter()
                .find(|(_, n)| n == event)
                .map(|(pos, _)| *pos as usize - 1);
            CounterSlot {
                type_slot: fed_by.filter(|_| configured),
                half_life_ms: *half_life,
            }
        })
        .collect();
    Ok(Layout {
        type_pos,
        types: types.len(),
        counters,
        weight: config.weight(),
    })
}
