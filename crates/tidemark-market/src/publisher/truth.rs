//! The truth file (`PublishOptions::truth`): what the synthetic market knows
//! of each transaction with an impression, one tab-separated line each
//! under a header (`crate::truth::TSV_HEADER`), written as the market
//! generates it.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::error::file_error;
use super::PublishError;

/// Where the market's truth goes (`PublishOptions::truth`).
pub(super) struct TruthFile {
    file: BufWriter<std::fs::File>,
    path: PathBuf,
    line: String,
}

impl TruthFile {
    pub(super) fn create(path: &Path) -> Result<TruthFile, PublishError> {
        let f = std::fs::File::create(path).map_err(file_error(path))?;
        let mut file = BufWriter::with_capacity(1 << 20, f);
        writeln!(file, "{}", crate::truth::TSV_HEADER).map_err(file_error(path))?;
        Ok(TruthFile {
            file,
            path: path.to_owned(),
            line: String::new(),
        })
    }

    /// Writes and empties `truths`.
    pub(super) fn write(&mut self, truths: &mut Vec<crate::Truth>) -> Result<(), PublishError> {
        for t in truths.drain(..) {
            self.line.clear();
            t.write_tsv(&mut self.line);
            self.line.push('\n');
            self.file
                .write_all(self.line.as_bytes())
                .map_err(file_error(&self.path))?;
        }
        Ok(())
    }

    /// Writes what is left of `truths` and flushes the file.
    pub(super) fn finish(mut self, truths: &mut Vec<crate::Truth>) -> Result<(), PublishError> {
        self.write(truths)?;
        self.file.flush().map_err(file_error(&self.path))
    }
}
