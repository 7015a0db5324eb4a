//! What the loom models share: running a model with a bounded number of preemptions.

/// Preemptions explored per execution when `LOOM_MAX_PREEMPTIONS` is not set: 3 finds the
/// known classes of lock-ordering bugs (loom's documentation suggests 2–3) and keeps each model
/// to seconds; set the variable higher for a longer, exhaustive run.
const DEFAULT_PREEMPTION_BOUND: usize = 3;

/// Runs `f` under loom with [`DEFAULT_PREEMPTION_BOUND`] unless the environment sets one.
pub fn model(f: impl Fn() + Send + Sync + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(DEFAULT_PREEMPTION_BOUND);
    }
    builder.check(f);
}
