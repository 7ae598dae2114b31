//! The one reading of mcpmon's `/metrics` in the tests: the strict parser
//! the renderer's fuzz target is checked against (so a test also fails on
//! text Prometheus would refuse), and the sum over the series a test names.

use mcpmon::fuzzing::{Sample, parse_exposition};

/// The sum of the samples of `family` whose labels match every one of
/// `labels`: a value ending in `*` matches as a prefix.
pub fn sum(metrics: &str, family: &str, labels: &[(&str, &str)]) -> f64 {
    matching(metrics, family, labels).map(|s| s.value).sum()
}

/// The value of the first sample of `family` whose labels match `labels`
/// (as in [`sum`]), if there is one.
pub fn value(metrics: &str, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    matching(metrics, family, labels).next().map(|s| s.value)
}

/// The value of `series`, written as the exposition writes it (`name` or
/// `name{label="value",…}`): its name and exactly its labels.
pub fn metric(metrics: &str, series: &str) -> Option<f64> {
    let name = series.split('{').next().unwrap_or(series);
    let wanted = parse_exposition(&format!("# TYPE {name} untyped\n{series} 0\n"))
        .unwrap_or_else(|e| panic!("{series:?} is not a series: {e}"));
    let labels = &wanted.first()?.labels;
    parse_exposition(metrics)
        .unwrap_or_else(|e| panic!("/metrics is not valid exposition text: {e}"))
        .into_iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels.iter().all(|l| s.labels.contains(l))
        })
        .map(|s| s.value)
}

fn matching<'a>(
    metrics: &str,
    family: &'a str,
    labels: &'a [(&str, &str)],
) -> impl Iterator<Item = Sample> + 'a {
    let samples = parse_exposition(metrics)
        .unwrap_or_else(|e| panic!("/metrics is not valid exposition text: {e}"));
    samples
        .into_iter()
        .filter(move |s| s.name == family && labels.iter().all(|want| has(s, *want)))
}

fn has(sample: &Sample, (name, want): (&str, &str)) -> bool {
    sample.labels.iter().any(|(n, v)| {
        n == name
            && match want.strip_suffix('*') {
                Some(prefix) => v.starts_with(prefix),
                None => v == want,
            }
    })
}

#[test]
fn sums_match_names_exactly_and_values_exactly_or_by_prefix() {
    let text = "# TYPE a_total counter\na_total{server=\"sd1\",r=\"x\"} 1\na_total{server=\"sd2\",r=\"y\"} 2\na_total{server=\"other\"} 4\n# TYPE a_total_b gauge\na_total_b{server=\"sd1\"} 8\n";
    assert_eq!(sum(text, "a_total", &[("server", "sd*")]), 3.0);
    assert_eq!(sum(text, "a_total", &[("server", "sd1")]), 1.0);
    assert_eq!(sum(text, "a_total", &[("server", "sd")]), 0.0);
    assert_eq!(sum(text, "a_total", &[]), 7.0);
    assert_eq!(value(text, "a_total", &[("r", "y")]), Some(2.0));
    assert_eq!(value(text, "a_total", &[("r", "z")]), None);
    assert_eq!(metric(text, "a_total{r=\"y\",server=\"sd2\"}"), Some(2.0));
    assert_eq!(metric(text, "a_total{server=\"sd2\"}"), None);
    assert_eq!(metric(text, "a_total{server=\"other\"}"), Some(4.0));
}
