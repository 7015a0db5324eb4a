//! This node's part of the tasks API: its tasks as `_tasks` lists them, one of them, and
//! cancelling them. The coordinator routes `GET _tasks/{node}:{n}` and `_cancel` of one task
//! to the node in the id, and fans list and filtered cancel out to every selected member.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sluice_cluster::Member;
use sluice_engine::{EngineError, ErrorCode};

use crate::state::AppState;
use crate::tasks::{Task, TaskId};

/// The reason a task cancelled through the API carries, as OpenSearch words it.
const BY_USER_REQUEST: &str = "by user request";

/// Which tasks a list or cancel call means (the node selector is the coordinator's).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskFilter {
    /// `actions`: wildcard patterns; empty means every action.
    pub actions: Vec<String>,
    /// `parent_task_id` (`node:seq`).
    pub parent_task_id: Option<String>,
    /// `detailed`.
    pub detailed: bool,
    /// Only this user's tasks (a caller without the cluster permission to see or cancel
    /// anyone's; decided by the coordinating node); `None` for everyone's.
    #[serde(default)]
    pub only_user: Option<String>,
}

/// One task by id (`node:seq`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OneTask {
    /// The task id as the client wrote it.
    pub id: String,
    /// Only if it is this user's task (else it is answered as missing, so its existence is
    /// not the caller's to learn); `None` for anyone's.
    #[serde(default)]
    pub only_user: Option<String>,
    /// `wait_for_completion=true`: how long to wait for a running task's end, in
    /// milliseconds (`u64::MAX`: no bound); `None` answers the task as it is now.
    #[serde(default)]
    pub wait_millis: Option<u64>,
}

/// A cancel: one task (and its descendants) or every task the filter matches.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CancelTasks {
    /// The one task to cancel, if the request named one.
    pub id: Option<String>,
    /// Otherwise, the filter.
    pub filter: TaskFilter,
}

impl TaskFilter {
    fn matches(&self, st: &AppState, parent: Option<&TaskId>, t: &Task) -> bool {
        let action_ok = self.actions.is_empty()
            || self
                .actions
                .iter()
                .any(|p| sluice_engine::mapping::wildcard_match(p, t.action));
        let parent_ok = match parent {
            None => true,
            Some(p) => p.node == st.tasks.node_id() && t.parent == Some(p.seq),
        };
        action_ok && parent_ok && visible_to(self.only_user.as_deref(), t)
    }

    fn parent(&self) -> Result<Option<TaskId>, EngineError> {
        self.parent_task_id
            .as_deref()
            .map(|p| TaskId::parse(p).ok_or_else(|| malformed_id(p)))
            .transpose()
    }
}

/// Whether task `t` is one `only_user` may touch (`None`: anyone's).
fn visible_to(only_user: Option<&str>, t: &Task) -> bool {
    owned_by(only_user, t.principal.as_deref())
}

/// Whether a task run by `owner` is one `only_user` may touch (`None`: anyone's): its stored
/// result as much as the task while it runs.
fn owned_by(only_user: Option<&str>, owner: Option<&crate::auth::Principal>) -> bool {
    only_user.is_none_or(|u| owner.is_some_and(|p| *p.username == *u))
}

fn malformed_id(id: &str) -> EngineError {
    EngineError::illegal_argument(format!("malformed task id {id}"))
}

/// OpenSearch's answer for a task that is not running here.
pub fn task_missing(raw: &str) -> EngineError {
    EngineError::new(
        ErrorCode::ResourceNotFound,
        format!("task [{raw}] isn't running and hasn't stored its results"),
    )
}

/// `{"tasks": {"node:seq": task}}` of the tasks matching `f`.
pub(super) fn list(st: &AppState, f: &TaskFilter) -> Result<Value, EngineError> {
    let parent = f.parent()?;
    let tasks: Map<String, Value> = st
        .tasks
        .list()
        .into_iter()
        .filter(|t| f.matches(st, parent.as_ref(), t))
        .map(|t| (id_of(st, &t), st.tasks.render(&t, f.detailed)))
        .collect();
    Ok(json!({ "tasks": tasks }))
}

/// `{"completed": false, "task": …}` of one running task, or with `wait_millis` what it is
/// when it ends: its stored result (a background task), else `{"completed": true, "task": …}`
/// of it as it was when the wait began (OpenSearch's answer for a task that keeps no result).
pub(super) async fn get(st: &AppState, p: &OneTask) -> Result<Value, EngineError> {
    let seq = local_seq(st, &p.id)?;
    match st.tasks.lookup(seq) {
        crate::tasks::Lookup::Running(t) if visible_to(p.only_user.as_deref(), &t) => {
            let snapshot = st.tasks.render(&t, true);
            let Some(wait) = p.wait_millis else {
                return Ok(json!({"completed": false, "task": snapshot}));
            };
            let deadline = tokio::time::Instant::now()
                .checked_add(Duration::from_millis(wait))
                .unwrap_or_else(crate::tasks::far_future);
            drop(t);
            if !st.tasks.wait_until_ended(seq, deadline).await {
                return Err(EngineError::new(
                    ErrorCode::Timeout,
                    format!("Timed out waiting for completion of [{}]", p.id),
                ));
            }
            match st.tasks.lookup(seq) {
                crate::tasks::Lookup::Done(result) => Ok(result.doc),
                _ => Ok(json!({"completed": true, "task": snapshot})),
            }
        }
        crate::tasks::Lookup::Running(_) => Err(task_missing(&p.id)),
        // A background task that ended: its stored result, for whom the task was visible to.
        crate::tasks::Lookup::Done(result)
            if owned_by(p.only_user.as_deref(), result.owner.as_deref()) =>
        {
            Ok(result.doc)
        }
        crate::tasks::Lookup::Done(_) => Err(task_missing(&p.id)),
        crate::tasks::Lookup::Missing => Err(task_missing(&p.id)),
    }
}

/// Cancels one task and its descendants, or every task the filter matches; answers
/// `{"tasks": {…}}` of the tasks it named (for one id, that task only, as OpenSearch).
pub(super) fn cancel(st: &AppState, p: &CancelTasks) -> Result<Value, EngineError> {
    let mut out = Map::new();
    match &p.id {
        Some(id) => {
            let seq = local_seq(st, id)?;
            let only_user = p.filter.only_user.as_deref();
            if st.tasks.get(seq).is_none_or(|t| !visible_to(only_user, &t)) {
                return Err(task_missing(id));
            }
            for t in st
                .tasks
                .cancel_seq(seq, BY_USER_REQUEST)
                .iter()
                .filter(|t| t.seq == seq)
            {
                out.insert(id_of(st, t), st.tasks.render(t, false));
            }
        }
        None => {
            let parent = p.filter.parent()?;
            for t in st
                .tasks
                .list()
                .into_iter()
                .filter(|t| p.filter.matches(st, parent.as_ref(), t))
            {
                st.tasks.cancel_seq(t.seq, BY_USER_REQUEST);
                out.insert(id_of(st, &t), st.tasks.render(&t, false));
            }
        }
    }
    Ok(json!({ "tasks": out }))
}

fn id_of(st: &AppState, t: &Task) -> String {
    format!("{}:{}", st.tasks.node_id(), t.seq)
}

fn local_seq(st: &AppState, raw: &str) -> Result<u64, EngineError> {
    let id = TaskId::parse(raw).ok_or_else(|| malformed_id(raw))?;
    if id.node != st.tasks.node_id() {
        return Err(task_missing(raw));
    }
    Ok(id.seq)
}

/// A node's entry in a tasks answer: who it is, and its `tasks`.
pub fn task_entry_of(m: &Member, tasks: Value) -> Value {
    json!({
        "name": m.name,
        "transport_address": m.transport_addr.to_string(),
        "host": m.transport_addr.ip().to_string(),
        "ip": m.transport_addr.to_string(),
        "roles": crate::cluster::ROLES,
        "tasks": tasks,
    })
}
