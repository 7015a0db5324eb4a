//! The enforcement pass's dry run (issue #16): the running tasks mode `enabled` would have
//! cancelled ([`sluice_core::resources::select_would_cancel`], which decides), counted in their
//! group's `total_would_cancel`.
//!
//! # Decisions
//! - A task counts once, however many passes would pick it: the figure reads "tasks that would
//!   have been cancelled", not "passes that would have cancelled". The pass logs its own
//!   selection each time, as OpenSearch does in `monitor_only`; a `monitor` group's task, which
//!   the pass never selects, gets its dry-run decision line here, when it is first counted.
//!
//! # Invariants
//! - `seen` holds only tasks still running, so it is bounded by the registry
//!   (`test_monitor_only_counts_would_cancel_once_per_task` counts once over several passes).

use std::collections::HashSet;
use std::sync::Arc;

use sluice_core::resources::{PassInputs, PassOutcome, select_would_cancel};

use crate::state::AppState;
use crate::tasks::Task;

/// Counts in their groups' `total_would_cancel` the tasks that `enabled` would have cancelled
/// in the pass `inputs` → `outcome`, skipping those already in `seen`; `seen` keeps only tasks
/// still running.
pub fn count_would_cancel(
    st: &AppState,
    seen: &mut HashSet<u64>,
    tasks: &[Arc<Task>],
    inputs: &PassInputs,
    outcome: &PassOutcome,
) {
    if !outcome.ran {
        return;
    }
    let would = select_would_cancel(inputs, outcome);
    let running: HashSet<u64> = tasks.iter().map(|t| t.seq).collect();
    seen.retain(|seq| running.contains(seq));
    let node = st.tasks.node_id();
    for c in &would {
        let Some(task) = tasks.iter().find(|t| t.seq == c.task_id) else {
            continue;
        };
        if !seen.insert(task.seq) {
            continue;
        }
        let Some(entry) = task.group() else {
            continue;
        };
        entry.stats.total_would_cancel.inc();
        let selected_by_pass = outcome.cancellations.iter().any(|p| p.task_id == c.task_id);
        if !selected_by_pass {
            super::log_cancel(
                st,
                task,
                false,
                &format_args!(
                    "task {node}:{} of a monitor group would be cancelled as enforced: {}",
                    c.task_id, c.reason
                ),
            );
        }
    }
}
