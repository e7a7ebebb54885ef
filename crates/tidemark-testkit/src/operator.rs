//! An operator's transaction left open: a session that holds what it took
//! (a row, a table lock) until the test ends it.

/// An open transaction on a connection of its own (and a runtime that
/// drives it between calls).
pub struct Operator {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Operator {
    /// Connects to `url` and runs `BEGIN; <sql>`, leaving the transaction open.
    pub fn begin(url: &str, sql: &str) -> Operator {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(tidemark_store::connect(url)).unwrap();
        rt.block_on(client.batch_execute(&format!("BEGIN; {sql}")))
            .unwrap();
        Operator { rt, client }
    }

    /// Commits: what it held is let go.
    pub fn commit(self) {
        self.rt
            .block_on(self.client.batch_execute("COMMIT"))
            .unwrap();
    }
}
