//! The demo's ground truth beside the observations it scores (`tidemark
//! demo`): the market's truth file loaded into `tidemark_demo.truth` in the
//! demo's database (not a migration: no other database has it), and the
//! observations joined with it in the order the demo's evaluation replays.

use bytes::Bytes;
use futures_util::SinkExt;
use tokio_postgres::Client;

use tidemark_store::StoreError;

/// Replaces `tidemark_demo.truth` with a truth file's contents (tab-separated,
/// a header line, empty = absent; `tidemark_market::truth::TSV_HEADER`).
/// Returns the rows loaded.
pub async fn load_truth(c: &Client, tsv: Vec<u8>) -> Result<u64, StoreError> {
    c.batch_execute(
        "DROP SCHEMA IF EXISTS tidemark_demo CASCADE;
         CREATE SCHEMA tidemark_demo;
         CREATE TABLE tidemark_demo.truth (
             txid text PRIMARY KEY,
             person integer,
             ctr double precision NOT NULL,
             cvr_short double precision,
             cvr_long double precision,
             click_delay_ms bigint,
             install_delay_ms bigint,
             p_install double precision NOT NULL)",
    )
    .await?;
    let sink = c
        .copy_in::<_, Bytes>(
            "COPY tidemark_demo.truth FROM STDIN (FORMAT csv, DELIMITER E'\\t', HEADER true)",
        )
        .await?;
    futures_util::pin_mut!(sink);
    sink.send(Bytes::from(tsv)).await?;
    Ok(sink.finish().await?)
}

/// One observation with the truth's probability of its label being 1.
#[derive(Debug, Clone)]
pub struct Scored {
    /// Its target.
    pub target: String,
    /// Its label.
    pub label: bool,
    /// The bid's features, as JSON text.
    pub features: String,
    /// The truth's probability (absent if the market recorded none: a
    /// transaction it never generated, or a custom target).
    pub truth: Option<f64>,
    /// When it was emitted, ms since the epoch (wall time).
    pub emitted_ms: i64,
    /// Its transaction.
    pub txid: String,
    /// For a `ctr` row, the truth's P(click, then an install by the end of
    /// the long window): the `p_install` a bidder prices.
    pub p_install: Option<f64>,
    /// A `ctr` row whose transaction its shard has swept through the last
    /// install window: whether it installed is known.
    pub settled: bool,
    /// `provisional`, `late` or `final` (SPEC 5).
    pub kind: String,
}

/// Every observation, in emission order across shards (then shard, seq),
/// with its truth.
pub async fn scored(c: &Client) -> Result<Vec<Scored>, StoreError> {
    let rows = c
        .query(
            "SELECT o.target, o.label, o.features::text,
                    CASE o.target WHEN 'ctr' THEN t.ctr WHEN 'cvr_short' THEN t.cvr_short
                                  WHEN 'cvr_long' THEN t.cvr_long END,
                    (extract(epoch FROM o.emitted_at) * 1000)::bigint,
                    o.txid, CASE o.target WHEN 'ctr' THEN t.p_install END,
                    o.target = 'ctr' AND (extract(epoch FROM o.created_at) * 1000)::bigint
                        <= coalesce((SELECT w.wm_ms FROM tidemark.watermarks w
                                      WHERE w.shard = o.shard AND w.phase = 'cvr_long'), -1),
                    o.kind
               FROM tidemark.observations o LEFT JOIN tidemark_demo.truth t USING (txid)
              ORDER BY o.emitted_at, o.shard, o.seq",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Scored {
            target: r.get(0),
            label: r.get::<_, i16>(1) == 1,
            features: r.get(2),
            truth: r.get(3),
            emitted_ms: r.get(4),
            txid: r.get(5),
            p_install: r.get(6),
            settled: r.get(7),
            kind: r.get(8),
        })
        .collect())
}

/// The delays the market drew, from creation (ms of event time): clicks'
/// and installs'.
pub async fn delays(c: &Client) -> Result<(Vec<i64>, Vec<i64>), StoreError> {
    let rows = c
        .query(
            "SELECT click_delay_ms, install_delay_ms FROM tidemark_demo.truth
              WHERE click_delay_ms IS NOT NULL",
            &[],
        )
        .await?;
    let clicks = rows.iter().map(|r| r.get(0)).collect();
    let installs = rows.iter().filter_map(|r| r.get(1)).collect();
    Ok((clicks, installs))
}

/// Rows per buffer tier, over every shard (`tidemark.buffer_rows`; the
/// statistics collector's live-row estimates).
pub async fn buffer_rows(c: &Client) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = c
        .query(
            "SELECT tier, sum(rows)::bigint FROM tidemark.buffer_rows GROUP BY tier ORDER BY tier",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get::<_, Option<i64>>(1).unwrap_or(0)))
        .collect())
}

/// Observations per target so far.
pub async fn observations_by_target(c: &Client) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = c
        .query(
            "SELECT target, count(*) FROM tidemark.observations GROUP BY target ORDER BY target",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// One observation of a built-in target as the as-of-bid replay reads it,
/// with the truth of its transaction.
#[derive(Debug, Clone)]
pub struct Emitted {
    /// `ctr`, `cvr_short` or `cvr_long`.
    pub target: String,
    /// Its label.
    pub label: bool,
    /// `provisional`, `late` or `final`.
    pub kind: String,
    /// The bid's features, as JSON text.
    pub features: String,
    /// The shard's clock at the sweep that emitted it (event time, ms).
    pub clock_ms: i64,
    /// The transaction's creation (the bid), ms.
    pub created_ms: i64,
    /// The truth: ctr, cvr_short, cvr_long (given the click) and p_install.
    pub truth: [Option<f64>; 4],
    /// Its transaction.
    pub txid: String,
    /// The shard that emitted it.
    pub shard: String,
}

/// Every observation of the built-in targets, in the order the shards'
/// clocks made them readable, with the truth.
pub async fn emitted(c: &Client) -> Result<Vec<Emitted>, StoreError> {
    let rows = c
        .query(
            "SELECT o.target, o.label, o.kind, o.features::text, o.clock_ms,
                    (extract(epoch FROM o.created_at) * 1000)::bigint,
                    t.ctr, t.cvr_short, t.cvr_long, t.p_install, o.txid, o.shard
               FROM tidemark.observations o LEFT JOIN tidemark_demo.truth t USING (txid)
              WHERE o.target IN ('ctr', 'cvr_short', 'cvr_long') AND o.clock_ms IS NOT NULL
              ORDER BY o.clock_ms, o.shard, o.seq",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Emitted {
            target: r.get(0),
            label: r.get::<_, i16>(1) == 1,
            kind: r.get(2),
            features: r.get(3),
            clock_ms: r.get(4),
            created_ms: r.get(5),
            truth: [r.get(6), r.get(7), r.get(8), r.get(9)],
            txid: r.get(10),
            shard: r.get(11),
        })
        .collect())
}
