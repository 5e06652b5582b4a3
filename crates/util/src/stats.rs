//! Summary statistics of a small sample (turns of a benchmark, runs of a probe).

/// The mean; `None` for an empty sample.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The mean and the population standard deviation; `None` for an empty sample.
pub fn mean_sd(values: &[f64]) -> Option<(f64, f64)> {
    let m = mean(values)?;
    let var = values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / values.len() as f64;
    Some((m, var.sqrt()))
}

/// The mean and the sample standard deviation (n - 1); `None` with fewer than two values.
pub fn mean_sample_sd(values: &[f64]) -> Option<(f64, f64)> {
    if values.len() < 2 {
        return None;
    }
    let m = mean(values)?;
    let var = values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64;
    Some((m, var.sqrt()))
}

/// The median (the mean of the middle two for an even count); sorts `values` in place;
/// 0 for an empty sample.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_of_known_samples() {
        assert_eq!(mean(&[]), None);
        assert_eq!(mean(&[1.0, 2.0, 6.0]), Some(3.0));
        let (m, sd) = mean_sample_sd(&[1.0, 3.0]).unwrap();
        assert_eq!((m, sd), (2.0, 2.0f64.sqrt()));
        assert_eq!(mean_sample_sd(&[5.0]), None);
        let (m, sd) = mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!((m, sd), (5.0, 2.0));
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }
}
