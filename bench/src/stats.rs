//! Percentiles of samples.

use serde::Serialize;

/// Summary of a set of samples (same unit as the samples).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Smallest sample.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Summary {
    /// Summarizes `samples` (nearest-rank percentiles). All zero when empty.
    pub fn of(samples: &[f64]) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let index = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
            sorted[index.clamp(1, sorted.len()) - 1]
        };
        Summary {
            n: sorted.len(),
            min: sorted[0],
            p50: rank(50.0),
            p95: rank(95.0),
            p99: rank(99.0),
            max: sorted[sorted.len() - 1],
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
        }
    }
}

/// The median of `samples` (0 when empty).
pub fn median(samples: &[f64]) -> f64 {
    Summary::of(samples).p50
}

/// Groups `rows` by `key` (in the order keys first appear) and keeps, for each group, the
/// row of median `value`, to which `keep` hands every value of the group in the order they
/// were measured.
pub fn median_rows<T, K: PartialEq>(
    rows: Vec<T>,
    key: impl Fn(&T) -> K,
    value: impl Fn(&T) -> f64,
    keep: impl Fn(&mut T, Vec<f64>),
) -> Vec<T> {
    let mut groups: Vec<Vec<T>> = Vec::new();
    for row in rows {
        match groups.iter_mut().find(|group| key(&group[0]) == key(&row)) {
            Some(group) => group.push(row),
            None => groups.push(vec![row]),
        }
    }
    groups
        .into_iter()
        .map(|mut group| {
            let values: Vec<f64> = group.iter().map(&value).collect();
            group.sort_by(|a, b| value(a).total_cmp(&value(b)));
            let mut median = group.swap_remove((group.len() - 1) / 2);
            keep(&mut median, values);
            median
        })
        .collect()
}
