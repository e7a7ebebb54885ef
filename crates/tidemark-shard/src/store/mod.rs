//! The shard's SQL: its buffer tables (layout, COPY in, consolidation and
//! the sweeps' statements), its row in `tidemark.shards` with watermarks and
//! counters, and the quarantine. Connections, migrations and error classes
//! are `tidemark-store`'s.

pub mod buffer;
pub mod state;
pub mod sweep;
