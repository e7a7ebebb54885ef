//! The binary sections of a checkpoint after its header (weights, then
//! resume state), read in order with every length and index checked.

use crate::FormatError;

fn corrupt(why: &str) -> FormatError {
    FormatError::Corrupt(why.to_owned())
}

/// The binary sections after the header, read in order.
pub(crate) struct Sections<'a> {
    /// The file without its checksum.
    body: &'a [u8],
    /// Where the next section starts.
    at: usize,
}

impl<'a> Sections<'a> {
    /// The sections of `body` (the file without its checksum) from `at`.
    pub(crate) fn new(body: &'a [u8], at: usize) -> Sections<'a> {
        Sections { body, at }
    }

    /// A block of `count` (index, weight) entries.
    pub(crate) fn weights(
        &mut self,
        count: usize,
        slots: u32,
    ) -> Result<Vec<(u32, f32)>, FormatError> {
        let end = count
            .checked_mul(8)
            .and_then(|b| b.checked_add(self.at))
            .filter(|e| *e <= self.body.len())
            .ok_or_else(|| corrupt("weights length"))?;
        let weights = self.body[self.at..end]
            .chunks_exact(8)
            .map(|c| {
                let i = u32::from_le_bytes(c[..4].try_into().expect("4"));
                (i, f32::from_le_bytes(c[4..].try_into().expect("4")))
            })
            .collect::<Vec<_>>();
        if weights.iter().any(|(i, _)| *i >= slots) {
            return Err(corrupt("weight index out of range"));
        }
        self.at = end;
        Ok(weights)
    }

    /// A block of `count` (index, z, n) entries; kept only if `keep`.
    pub(crate) fn state(
        &mut self,
        count: Option<u64>,
        slots: u32,
        keep: bool,
    ) -> Result<Vec<(u32, f32, f32)>, FormatError> {
        let end = count
            .and_then(|n| usize::try_from(n).ok())
            .and_then(|n| n.checked_mul(12))
            .and_then(|b| b.checked_add(self.at))
            .filter(|e| *e <= self.body.len())
            .ok_or_else(|| corrupt("state length"))?;
        let state: Vec<(u32, f32, f32)> = if keep {
            self.body[self.at..end]
                .chunks_exact(12)
                .map(|c| {
                    let g = |r: std::ops::Range<usize>| c[r].try_into().expect("4");
                    (
                        u32::from_le_bytes(g(0..4)),
                        f32::from_le_bytes(g(4..8)),
                        f32::from_le_bytes(g(8..12)),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        if state.iter().any(|(i, _, _)| *i >= slots) {
            return Err(corrupt("state index out of range"));
        }
        self.at = end;
        Ok(state)
    }

    /// Every byte was read: nothing trails the last section.
    pub(crate) fn finish(&self) -> Result<(), FormatError> {
        if self.at != self.body.len() {
            return Err(corrupt("trailing bytes"));
        }
        Ok(())
    }
}
