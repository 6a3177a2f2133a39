//! The choice of a mixture (`tf.data.Dataset.sample_from_datasets`): which component the
//! next element comes from. Component `i` is chosen with probability `weights[i]` over the
//! sum of the weights of the components not found exhausted, from a seeded generator whose
//! state a checkpoint keeps, so the sequence of choices is a pure function of the seed and
//! of when components run out.
//!
//! With a cycle (`choose_from_datasets`) the components come in its order, again and
//! again; the weights are then how often each appears in it.
//!
//! As in TensorFlow, a component is found exhausted when the choice falls on it and it
//! has no element left: with `stop_on_empty` the mixture ends there; without, the
//! component drops out and the choice is made again among the others (its turns of a
//! cycle are skipped). The mixture ends when every component of positive weight is
//! exhausted (one of weight 0 is never chosen).

use super::rng::SplitMix64;

/// Generator stream of the choice (the pipelines' epochs use 1 to 3).
const MIX_STREAM: u64 = 4;

#[derive(Clone, Debug, PartialEq)]
pub struct MixChoice {
    weights: Vec<f64>,
    /// The components in turn (`choose_from_datasets`); empty: by weight.
    cycle: Vec<usize>,
    /// The next turn of the cycle (an index into it).
    turns: u64,
    rng: SplitMix64,
    exhausted: Vec<bool>,
    /// Each component that may be chosen by weight (not exhausted, of positive weight),
    /// in order, with the sum of the weights up to and including its own: made again
    /// whenever `exhausted` changes.
    bounds: Vec<(f64, usize)>,
    stop_on_empty: bool,
    ended: bool,
}

/// Where a choice is: what [`MixChoice::restore`] continues from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MixChoiceState {
    /// The generator's state, or with a cycle its next turn.
    pub rng: u64,
    pub exhausted: Vec<bool>,
    pub ended: bool,
}

impl MixChoice {
    /// `weights`: finite, non-negative, with a positive sum (the spec checks them), and
    /// with a `cycle` (indices of components) how often each appears in it.
    pub fn new(weights: Vec<f64>, cycle: Vec<usize>, seed: u64, stop_on_empty: bool) -> Self {
        let exhausted = vec![false; weights.len()];
        let rng = SplitMix64::for_epoch(seed, 0, MIX_STREAM);
        let mut choice =
            Self { weights, cycle, turns: 0, rng, exhausted, bounds: Vec::new(), stop_on_empty, ended: false };
        choice.set_bounds();
        choice
    }

    fn set_bounds(&mut self) {
        let mut below = 0.0;
        self.bounds = (0..self.weights.len())
            .filter(|&i| !self.exhausted[i] && self.weights[i] > 0.0)
            .map(|i| {
                below += self.weights[i];
                (below, i)
            })
            .collect();
    }

    /// The component the next element comes from; `None` once the mixture ended.
    pub fn choose(&mut self) -> Option<usize> {
        if self.ended {
            return None;
        }
        let active = |i: usize| !self.exhausted[i] && self.weights[i] > 0.0;
        if !self.cycle.is_empty() {
            // Not ended: a component of the cycle is active, within one round.
            for _ in 0..self.cycle.len() {
                let i = self.cycle[self.turns as usize];
                self.turns = (self.turns + 1) % self.cycle.len() as u64;
                if active(i) {
                    return Some(i);
                }
            }
            return None;
        }
        let total = self.bounds.last().map_or(0.0, |&(total, _)| total);
        // 53 random bits: a uniform draw in [0, total).
        let draw = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
        match self.bounds.iter().find(|&&(below, _)| draw < below) {
            Some(&(_, i)) => Some(i),
            // Rounding left the draw at the top: the last active component.
            None => self.bounds.last().map(|&(_, i)| i),
        }
    }

    /// The chosen `component` had no element left.
    pub fn exhausted(&mut self, component: usize) {
        self.exhausted[component] = true;
        self.set_bounds();
        if self.stop_on_empty || self.bounds.is_empty() {
            self.ended = true;
        }
    }

    /// Components found exhausted may have elements again (a replica's component whose
    /// free splits other replicas held: they may have come free since). Not with
    /// `stop_on_empty`, whose end is final.
    pub fn look_again(&mut self) {
        if !self.stop_on_empty {
            self.exhausted.fill(false);
            self.set_bounds();
            self.ended = false;
        }
    }

    /// Whether the mixture ended: `choose` gives nothing more.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Ends the mixture with no more choices (a replica that joins a job whose mixture
    /// stopped elsewhere).
    pub fn end(&mut self) {
        self.ended = true;
    }

    pub fn any_exhausted(&self) -> bool {
        self.exhausted.contains(&true)
    }

    /// Whether `component` is exhausted (a component it does not have is not).
    pub fn is_exhausted(&self, component: usize) -> bool {
        self.exhausted.get(component).copied().unwrap_or(false)
    }

    pub fn state(&self) -> MixChoiceState {
        let rng = if self.cycle.is_empty() { self.rng.state } else { self.turns };
        MixChoiceState { rng, exhausted: self.exhausted.clone(), ended: self.ended }
    }

    /// The choice where `state` was taken; `None` if it is not a state of this many
    /// components (or of a turn of this cycle).
    pub fn restore(weights: Vec<f64>, cycle: Vec<usize>, stop_on_empty: bool, state: &MixChoiceState) -> Option<Self> {
        if state.exhausted.len() != weights.len() || (!cycle.is_empty() && state.rng >= cycle.len() as u64) {
            return None;
        }
        let mut choice = Self::new(weights, cycle, 0, stop_on_empty);
        choice.rng.state = state.rng;
        choice.turns = state.rng;
        choice.exhausted = state.exhausted.clone();
        choice.set_bounds();
        choice.ended = state.ended;
        Some(choice)
    }
}

/// Where a mixture is: its choice, and the elements it took from each component.
#[derive(Debug)]
pub struct MixProgress {
    pub choice: MixChoice,
    pub taken: Vec<u64>,
    /// On replicas: when components found with no free split were last taken back.
    pub looked_again_at: Option<std::time::Instant>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(choice: &mut MixChoice, n: usize) -> Vec<usize> {
        (0..n).map(|_| choice.choose().expect("not ended")).collect()
    }

    #[test]
    fn chooses_by_weight_and_is_deterministic_for_a_seed() {
        let mut choice = MixChoice::new(vec![3.0, 1.0], Vec::new(), 7, false);
        let sequence = draws(&mut choice, 40_000);
        let zeros = sequence.iter().filter(|&&i| i == 0).count() as f64;
        // Binomial(40000, 0.75): standard deviation about 87.
        assert!((zeros - 30_000.0).abs() < 5.0 * 87.0, "{zeros}");
        assert_eq!(draws(&mut MixChoice::new(vec![3.0, 1.0], Vec::new(), 7, false), 40_000), sequence);
        assert_ne!(draws(&mut MixChoice::new(vec![3.0, 1.0], Vec::new(), 8, false), 40_000), sequence);
    }

    #[test]
    fn an_exhausted_component_drops_out_or_ends_the_mixture() {
        let mut reweighted = MixChoice::new(vec![1.0, 1.0, 0.0], Vec::new(), 1, false);
        reweighted.exhausted(0);
        assert!(draws(&mut reweighted, 100).iter().all(|&i| i == 1), "weight 0 is never chosen");
        reweighted.exhausted(1);
        assert_eq!(reweighted.choose(), None, "no component of positive weight is left");
        reweighted.look_again();
        let again = draws(&mut reweighted, 100);
        assert!(again.contains(&0) && again.contains(&1) && !again.contains(&2), "both back: {again:?}");

        let mut stopping = MixChoice::new(vec![1.0, 1.0], Vec::new(), 1, true);
        stopping.exhausted(1);
        assert_eq!(stopping.choose(), None);
        stopping.look_again();
        assert_eq!(stopping.choose(), None, "a stopped mixture stays stopped");
    }

    #[test]
    fn a_cycle_gives_its_components_in_turn_skipping_or_stopping_at_the_exhausted() {
        // Weights are how often each component appears in the cycle.
        let mut cycle = MixChoice::new(vec![1.0, 2.0, 0.0], vec![0, 1, 1], 5, false);
        assert_eq!(draws(&mut cycle, 7), [0, 1, 1, 0, 1, 1, 0]);
        let state = cycle.state();
        let mut restored = MixChoice::restore(vec![1.0, 2.0, 0.0], vec![0, 1, 1], false, &state).expect("restores");
        assert_eq!(draws(&mut restored, 5), draws(&mut cycle, 5), "resumes at its turn");
        let past = MixChoiceState { rng: 3, ..state.clone() };
        assert!(MixChoice::restore(vec![1.0, 2.0, 0.0], vec![0, 1, 1], false, &past).is_none(), "no turn 3");
        cycle.exhausted(1);
        assert_eq!(draws(&mut cycle, 3), [0, 0, 0], "an exhausted component's turns are skipped");
        cycle.exhausted(0);
        assert_eq!(cycle.choose(), None);

        let mut stopping = MixChoice::new(vec![1.0, 1.0], vec![1, 0], 5, true);
        assert_eq!(draws(&mut stopping, 3), [1, 0, 1]);
        stopping.exhausted(1);
        assert_eq!(stopping.choose(), None, "stopOnEmptyDataset: the first exhausted turn ends it");
    }

    /// The choice by weight as first written (the active weights summed and scanned at
    /// every draw): what checkpoints taken then resume with.
    fn first_written(weights: &[f64], exhausted: &[bool], draw_bits: u64) -> Option<usize> {
        let active = |i: usize| !exhausted[i] && weights[i] > 0.0;
        let total: f64 = (0..weights.len()).filter(|&i| active(i)).map(|i| weights[i]).sum();
        let draw = (draw_bits >> 11) as f64 / (1u64 << 53) as f64 * total;
        let (mut below, mut last) = (0.0, None);
        for i in (0..weights.len()).filter(|&i| active(i)) {
            below += weights[i];
            last = Some(i);
            if draw < below {
                return last;
            }
        }
        last
    }

    #[test]
    fn draws_as_the_choice_first_written_did() {
        let weights = vec![0.1, 0.0, 0.7, 0.2, 1e-9];
        let mut choice = MixChoice::new(weights.clone(), Vec::new(), 3, false);
        let mut rng = SplitMix64::for_epoch(3, 0, MIX_STREAM);
        let mut exhausted = vec![false; weights.len()];
        for n in 0..30_000 {
            match n {
                10_000 => {
                    exhausted[2] = true;
                    choice.exhausted(2);
                }
                20_000 => {
                    exhausted.fill(false);
                    choice.look_again();
                }
                _ => {}
            }
            assert_eq!(choice.choose(), first_written(&weights, &exhausted, rng.next_u64()), "draw {n}");
        }
    }

    #[test]
    fn restores_where_it_was() {
        let mut choice = MixChoice::new(vec![0.5, 0.2, 0.3], Vec::new(), 11, false);
        draws(&mut choice, 17);
        choice.exhausted(2);
        let state = choice.state();
        let mut restored = MixChoice::restore(vec![0.5, 0.2, 0.3], Vec::new(), false, &state).expect("same components");
        assert_eq!(draws(&mut restored, 100), draws(&mut choice, 100));
        assert!(MixChoice::restore(vec![1.0], Vec::new(), false, &state).is_none());
    }
}
