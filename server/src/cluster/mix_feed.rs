//! A mixture served by replicas: one job in the ledger whose files are its components'
//! files one after the other (component `i`'s file `f` is the job's file `first[i] + f`),
//! so that each epoch's splits are every component's splits of that epoch, and each
//! component's pipeline leases only its own ([`ComponentFeed`]): the feed keeps the
//! job's number of each split it hands over (`FedFile::split`, which its records carry)
//! and gives the component's pipeline its own index of the file. Acknowledgements,
//! takeovers, checkpoints and the job's end are the job's, as for any shared reader.

use std::ops::Range;
use std::sync::Arc;

use super::job::{EpochOrder, JobFeed};
use crate::pipeline::feed::{FedFile, FileFeed};
use crate::pipeline::{PipelineConfig, RecordPipeline};
use crate::source::{SourceError, SplitRef};

/// Where a mixture's components lease their splits: the mixture's job
/// ([`JobFeed`]) or, for the window a shared mixture's jobs share on a replica, the
/// window's (`super::WindowFeed`, which leases them for the seated jobs too).
pub trait LeasesSplits: FileFeed {
    /// [`FileFeed::next_file`] among the splits of `files` only.
    fn next_file_in(&self, epoch: u64, files: Range<u32>) -> Result<Option<FedFile>, SourceError>;
}

/// One component's view of its mixture's job: the splits of its files, each file
/// indexed as the component indexes it.
pub struct ComponentFeed {
    job: Arc<dyn LeasesSplits>,
    /// The component's files among the job's.
    files: Range<u32>,
}

impl ComponentFeed {
    pub fn new(job: Arc<dyn LeasesSplits>, files: Range<u32>) -> Self {
        Self { job, files }
    }
}

impl LeasesSplits for JobFeed {
    fn next_file_in(&self, epoch: u64, files: Range<u32>) -> Result<Option<FedFile>, SourceError> {
        JobFeed::next_file_in(self, epoch, files)
    }
}

impl FileFeed for ComponentFeed {
    fn next_file(&self, epoch: u64) -> Result<Option<FedFile>, SourceError> {
        let Some(fed) = self.job.next_file_in(epoch, self.files.clone())? else { return Ok(None) };
        // The ledger leases only files of the range (`Ledger::lease_next`): a file outside
        // it is a bug, refused rather than read as another component's.
        match fed.file.checked_sub(self.files.start as usize) {
            Some(file) if file < self.files.len() => Ok(Some(FedFile { file, ..fed })),
            _ => Err(super::LedgerError::Inconsistent(format!(
                "the ledger leased file {} to the component of files {:?}",
                fed.file, self.files
            ))
            .for_epoch(epoch)),
        }
    }

    fn file_read(&self, split: SplitRef, records: u64) {
        self.job.file_read(split, records);
    }
}

/// A component as the job's file order sees it: its file count (its splits: with the
/// global shuffle, ranges of its permutation, `RecordPipeline::ledger_splits`), its pipeline (file
/// shuffling, sharding, epochs), and whether its splits are planned at all (not for a
/// component the choice never picks: they would never be done).
pub struct ComponentFiles {
    pub files: usize,
    pub pipeline: PipelineConfig,
    pub planned: bool,
}

/// Where each component's files start among the job's, and the job's file order of an
/// epoch: the orders of the planned components that read that epoch, one after the other,
/// each shifted to the job's numbering.
pub fn mixture_order(components: Vec<ComponentFiles>) -> (Vec<Range<u32>>, EpochOrder) {
    let mut ranges = Vec::with_capacity(components.len());
    let mut start = 0u32;
    for component in &components {
        let end = start + component.files as u32;
        ranges.push(start..end);
        start = end;
    }
    let firsts: Vec<usize> = ranges.iter().map(|range| range.start as usize).collect();
    let order: EpochOrder = Box::new(move |epoch| {
        let mut order = Vec::new();
        for (component, &first) in components.iter().zip(&firsts) {
            if !component.planned || component.pipeline.num_epochs.is_some_and(|epochs| epoch > epochs) {
                continue;
            }
            let files = RecordPipeline::ledger_order(component.files, &component.pipeline, epoch);
            order.extend(files.into_iter().map(|file| first + file));
        }
        order
    });
    (ranges, order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_epoch_orders_the_planned_components_that_read_it_one_after_the_other() {
        let pipeline = |epochs, shuffle| PipelineConfig {
            num_epochs: epochs,
            shuffle_files: shuffle,
            seed: 5,
            ..PipelineConfig::default()
        };
        let components = vec![
            ComponentFiles { files: 3, pipeline: pipeline(Some(1), false), planned: true },
            ComponentFiles { files: 4, pipeline: pipeline(Some(2), true), planned: true },
            ComponentFiles { files: 2, pipeline: pipeline(None, false), planned: false },
        ];
        let (ranges, order) = mixture_order(components);
        assert_eq!(ranges, vec![0..3, 3..7, 7..9], "numbered, planned or not");
        let first = order(1);
        assert_eq!(&first[..3], &[0, 1, 2]);
        let mut second: Vec<usize> = first[3..].to_vec();
        second.sort();
        assert_eq!(second, vec![3, 4, 5, 6], "component 1's files, shifted");
        let shuffled = RecordPipeline::epoch_order(4, &pipeline(Some(2), true), 2);
        assert_eq!(order(2), shuffled.iter().map(|f| f + 3).collect::<Vec<_>>(), "component 0 reads no epoch 2");
        assert!(order(3).is_empty(), "component 2 (weight 0) has no splits in any epoch");
    }
}
