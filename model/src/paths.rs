//! Every path of the model from its initial state, to a depth: what the replay drives the
//! engine through. A path ends at the depth, or earlier where no action is enabled.

use crate::protocol::{Action, Protocol};
use crate::state::State;

/// One path: the actions taken, and the state after each.
#[derive(Clone, Debug, Default)]
pub struct Path {
    pub steps: Vec<(Action, State)>,
}

/// Calls `visit` with every path of `protocol` to `depth` (actions), in a fixed order, until
/// `visit` answers false. Returns how many paths it visited.
pub fn for_each_path(
    protocol: &Protocol,
    depth: usize,
    mut visit: impl FnMut(&State, &Path) -> bool,
) -> usize {
    let initial = protocol.initial();
    let mut path = Path::default();
    let mut visited = 0;
    walk(
        protocol,
        &initial,
        &initial,
        depth,
        &mut path,
        &mut visit,
        &mut visited,
    );
    visited
}

/// Depth-first; answers false once `visit` asked to stop.
fn walk(
    protocol: &Protocol,
    initial: &State,
    state: &State,
    depth: usize,
    path: &mut Path,
    visit: &mut impl FnMut(&State, &Path) -> bool,
    visited: &mut usize,
) -> bool {
    let next: Vec<(Action, State)> = if path.steps.len() < depth {
        Protocol::all_actions()
            .into_iter()
            .filter_map(|action| protocol.step(state, action).map(|after| (action, after)))
            .collect()
    } else {
        Vec::new()
    };
    if next.is_empty() {
        *visited += 1;
        return visit(initial, path);
    }
    for (action, after) in next {
        path.steps.push((action, after));
        let go_on = walk(protocol, initial, &after, depth, path, visit, visited);
        path.steps.pop();
        if !go_on {
            return false;
        }
    }
    true
}
