//! Median and range of repeated measurements: what every benchmark prints, since one run on a
//! shared machine means little.

/// The median (the mean of the middle two for an even count), smallest and largest of
/// `values`; zeros for none.
pub fn median_and_range(values: impl IntoIterator<Item = f64>) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    (median, v[0], v[v.len() - 1])
}

/// The `p`-quantile (0..=1) of values sorted ascending, by nearest rank; 0 for none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts_and_the_range() {
        assert_eq!(median_and_range([]), (0.0, 0.0, 0.0));
        assert_eq!(median_and_range([3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(median_and_range([4.0, 1.0]), (2.5, 1.0, 4.0));
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let sorted = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&sorted, 0.0), 1.0);
        assert_eq!(percentile(&sorted, 0.5), 3.0);
        assert_eq!(percentile(&sorted, 1.0), 5.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
