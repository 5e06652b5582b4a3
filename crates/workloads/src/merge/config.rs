//! What the paper compares: temporal merge on or off, serialized or pipelined post-I/O
//! work, and how a device request's waiting thread waits ([`Polling`]: the paper's two).

use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::smartport::StrategyChoice;
use smartcon_engine::wait::PollParams;
use smartcon_util::units::format_size;

use super::{MERGE_PAGES_MAX, PAGE_BYTES};

/// The paper's two pollings, as the strategies they are (the study's rows keep the paper's
/// names: `fixed/serialized`, `dynamic/pipelined`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polling {
    /// A poll every `interval` (the paper's baseline; its best interval was 1 us): `poll`.
    Fixed,
    /// Dynamic interval polling: `hybrid`.
    Dynamic,
}

impl Polling {
    pub fn name(self) -> &'static str {
        match self {
            Polling::Fixed => "fixed",
            Polling::Dynamic => "dynamic",
        }
    }

    /// The `--strategy` this polling is.
    pub fn strategy(self) -> StrategyChoice {
        match self {
            Polling::Fixed => StrategyChoice::Fixed(Strategy::FixedPoll),
            Polling::Dynamic => StrategyChoice::Fixed(Strategy::Hybrid),
        }
    }

    /// The polling a strategy is, if it is one of the paper's two.
    pub fn of(strategy: StrategyChoice) -> Option<Polling> {
        [Polling::Fixed, Polling::Dynamic].into_iter().find(|p| p.strategy() == strategy)
    }
}

/// The name a configuration's wait goes by in labels and records: the paper's `fixed` and
/// `dynamic` for `poll` and `hybrid`, else the strategy's own name.
pub fn wait_name(strategy: StrategyChoice) -> &'static str {
    Polling::of(strategy).map_or(strategy.name(), Polling::name)
}

/// The switches the paper compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeConfig {
    /// Temporal merge of pending requests into one device request.
    pub merge: bool,
    /// Page-unit ack and post-I/O work as the pages complete (else after the whole request).
    pub pipelined: bool,
    /// The largest merged request, in pages.
    pub merge_pages_max: u32,
    /// How a device request's waiting thread waits: any `--strategy` ([`Polling`] names the
    /// paper's two).
    pub strategy: StrategyChoice,
    pub poll: PollParams,
    /// The size of every request (whole pages).
    pub bs_bytes: u64,
    /// Verify the `smartcon_engine::verify` pattern with this seed in the post-I/O work.
    pub verify_seed: Option<u64>,
}

impl MergeConfig {
    pub fn new(merge: bool, pipelined: bool, polling: Polling) -> MergeConfig {
        MergeConfig::with_strategy(merge, pipelined, polling.strategy())
    }

    /// A configuration whose requests are waited for by `strategy`.
    pub fn with_strategy(merge: bool, pipelined: bool, strategy: StrategyChoice) -> MergeConfig {
        MergeConfig {
            merge,
            pipelined,
            merge_pages_max: 32,
            strategy,
            poll: PollParams::DEFAULT,
            bs_bytes: PAGE_BYTES,
            verify_seed: Some(smartcon_engine::job::FILL_SEED),
        }
    }

    /// A short name: `fixed/serialized`, `dynamic/pipelined`, `no-merge/fixed`, `smart/pipelined`.
    pub fn label(&self) -> String {
        if self.merge {
            format!("{}/{}", self.wait_name(), if self.pipelined { "pipelined" } else { "serialized" })
        } else {
            format!("no-merge/{}", self.wait_name())
        }
    }

    /// [`wait_name`] of the configuration's strategy.
    pub fn wait_name(&self) -> &'static str {
        wait_name(self.strategy)
    }

    /// Whether the strategy's policy has a sampling phase (which must end within a run).
    pub fn samples(&self) -> bool {
        matches!(self.strategy, StrategyChoice::Fixed(Strategy::Hybrid | Strategy::Dip) | StrategyChoice::SmartHybrid)
    }

    /// Checks what does not depend on the run's duration.
    pub fn validate(&self) -> Result<(), Error> {
        let usage = |m: String| Err(Error::new(ErrorKind::Usage, m));
        if self.merge_pages_max == 0 || self.merge_pages_max > MERGE_PAGES_MAX {
            return usage(format!("max merge {} is out of range (1 to {MERGE_PAGES_MAX} pages)", self.merge_pages_max));
        }
        if self.bs_bytes == 0 || !self.bs_bytes.is_multiple_of(PAGE_BYTES) {
            return usage(format!("block size {} is not a whole number of 4 KiB pages", self.bs_bytes));
        }
        if self.bs_bytes / PAGE_BYTES > self.merge_pages_max as u64 {
            return usage(format!(
                "block size {} is larger than the largest merged request ({} pages)",
                format_size(self.bs_bytes),
                self.merge_pages_max
            ));
        }
        Ok(())
    }
}
