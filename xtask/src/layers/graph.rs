//! The rules over a module graph (nodes `0..n`, directed edges): its cycles, and edges that
//! point up a declared order of layers.

use std::collections::VecDeque;

/// The strongly connected components with more than one node, each sorted (Tarjan's algorithm).
pub fn tangles(nodes: usize, edges: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let mut search = Tarjan {
        successors: successors(nodes, edges),
        index: vec![None; nodes],
        low: vec![0; nodes],
        on_stack: vec![false; nodes],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    for node in 0..nodes {
        if search.index[node].is_none() {
            search.visit(node);
        }
    }
    let mut components: Vec<Vec<usize>> = search
        .components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|mut c| {
            c.sort_unstable();
            c
        })
        .collect();
    components.sort();
    components
}

fn successors(nodes: usize, edges: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let mut successors = vec![Vec::new(); nodes];
    for &(from, to) in edges {
        successors[from].push(to);
    }
    successors
}

struct Tarjan {
    successors: Vec<Vec<usize>>,
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan {
    fn visit(&mut self, node: usize) {
        self.index[node] = Some(self.next);
        self.low[node] = self.next;
        self.next += 1;
        self.stack.push(node);
        self.on_stack[node] = true;
        for i in 0..self.successors[node].len() {
            let next = self.successors[node][i];
            match self.index[next] {
                None => {
                    self.visit(next);
                    self.low[node] = self.low[node].min(self.low[next]);
                }
                Some(index) if self.on_stack[next] => {
                    self.low[node] = self.low[node].min(index);
                }
                Some(_) => {}
            }
        }
        if Some(self.low[node]) == self.index[node] {
            let mut component = Vec::new();
            while let Some(member) = self.stack.pop() {
                self.on_stack[member] = false;
                component.push(member);
                if member == node {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

/// Cycles within one component that between them use every edge inside it: for each edge, the
/// shortest cycle through it. Each is a list of nodes (the edge back to the first is implied),
/// rotated to start at its smallest node, and each is listed once.
pub fn cycles(component: &[usize], edges: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let inside: Vec<(usize, usize)> = edges
        .iter()
        .copied()
        .filter(|(from, to)| component.contains(from) && component.contains(to))
        .collect();
    let mut found: Vec<Vec<usize>> = Vec::new();
    for &(from, to) in &inside {
        let Some(back) = shortest_path(to, from, &inside) else {
            continue;
        };
        // `from -> to -> .. -> from`, as the nodes `from, to, ..`.
        let mut cycle = vec![from];
        cycle.extend(&back[..back.len() - 1]);
        let start = cycle
            .iter()
            .enumerate()
            .min_by_key(|(_, node)| **node)
            .map_or(0, |(i, _)| i);
        cycle.rotate_left(start);
        if !found.contains(&cycle) {
            found.push(cycle);
        }
    }
    found.sort();
    found
}

/// The nodes of a shortest path `from -> .. -> to` over `edges` (both ends included).
fn shortest_path(from: usize, to: usize, edges: &[(usize, usize)]) -> Option<Vec<usize>> {
    let mut came_from: Vec<(usize, usize)> = Vec::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = vec![from];
    while let Some(node) = queue.pop_front() {
        if node == to {
            let mut path = vec![to];
            let mut at = to;
            while at != from {
                at = came_from.iter().find(|(n, _)| *n == at)?.1;
                path.push(at);
            }
            path.reverse();
            return Some(path);
        }
        for &(a, b) in edges {
            if a == node && !seen.contains(&b) {
                seen.push(b);
                came_from.push((b, a));
                queue.push_back(b);
            }
        }
    }
    None
}

/// The edges (by index) that point from a lower layer to a higher one; `layer_of` gives each
/// node's position in the order, lowest first, or `None` for a node the order leaves out (such
/// a node is reported on its own, not here).
pub fn upward(edges: &[(usize, usize)], layer_of: &[Option<usize>]) -> Vec<usize> {
    edges
        .iter()
        .enumerate()
        .filter(|(_, (from, to))| match (layer_of[*from], layer_of[*to]) {
            (Some(from), Some(to)) => to > from,
            _ => false,
        })
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_of_more_than_one_node_are_tangles() {
        // 0 -> 1 -> 2 -> 0 is a cycle, 3 <-> 4 another, 5 only points into the first.
        let edges = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 3), (5, 0), (2, 2)];
        assert_eq!(
            tangles(6, &edges),
            [vec![0, 1, 2], vec![3, 4]],
            "each cycle's nodes; a node outside any cycle (5, or 2's self-loop alone) is none"
        );
        assert!(
            tangles(3, &[(0, 1), (1, 2), (0, 2)]).is_empty(),
            "a graph without cycles has no tangle"
        );
    }

    #[test]
    fn every_edge_of_a_tangle_is_on_a_named_cycle() {
        // Two cycles sharing node 0: 0 -> 1 -> 0 and 0 -> 2 -> 3 -> 0.
        let edges = [(0, 1), (1, 0), (0, 2), (2, 3), (3, 0)];
        let component = &tangles(4, &edges)[0];
        assert_eq!(
            cycles(component, &edges),
            [vec![0, 1], vec![0, 2, 3]],
            "both cycles are named, each once, from its smallest node"
        );
    }

    #[test]
    fn an_edge_up_the_order_is_reported_and_one_down_or_level_is_not() {
        let layer_of = [Some(0), Some(1), Some(1), None];
        let edges = [(1, 0), (1, 2), (0, 2), (3, 0), (0, 3)];
        assert_eq!(
            upward(&edges, &layer_of),
            [2],
            "only 0 -> 2 goes from a lower layer to a higher one"
        );
    }
}
