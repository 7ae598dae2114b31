use super::*;

#[test]
fn quantiles_interpolate_inside_their_bucket_as_prometheus_does() {
    let bounds = [0.01, 0.1, 0.5];
    assert_eq!(quantile(0.5, &bounds, &[0, 0, 0]), 0.0, "no observations");
    // 10 observations, all in (0.01, 0.1]: the median is halfway.
    assert!((quantile(0.5, &bounds, &[0, 10, 0]) - 0.055).abs() < 1e-9);
    // 9 fast, 1 slow: p95 is in the slow bucket's first half.
    let p95 = quantile(0.95, &bounds, &[9, 0, 1]);
    assert!((p95 - 0.3).abs() < 1e-9, "{p95}");
    assert_eq!(quantile(0.5, &bounds, &[4, 0, 0]), 0.005);
}

#[test]
fn a_histogram_that_went_back_is_a_new_one() {
    assert_eq!(diff(&[5, 3], &[2, 1]), vec![3, 2]);
    assert_eq!(
        diff(&[1, 0], &[2, 1]),
        vec![1, 0],
        "replaced: all of it is new"
    );
    assert_eq!(diff(&[1, 1], &[]), vec![1, 1], "first seen");
}

#[test]
fn resolutions_hold_their_windows_and_start_on_their_period() {
    assert_eq!(
        Resolution::for_window(Duration::from_secs(3600)),
        Resolution::Minute
    );
    assert_eq!(
        Resolution::for_window(Duration::from_secs(7 * 86_400)),
        Resolution::Hour
    );
    assert_eq!(
        Resolution::for_window(Duration::from_secs(365 * 86_400)),
        Resolution::Day
    );
    assert_eq!(Resolution::Hour.start(7205), 7200);
    assert_eq!(
        Resolution::Day.kept(Duration::from_secs(30 * 86_400)),
        Duration::from_secs(30 * 86_400)
    );
    assert_eq!(
        Resolution::Hour.kept(Duration::from_secs(400 * 86_400)),
        Duration::from_secs(90 * 86_400)
    );
}

#[test]
fn the_fleet_page_days_add_up_per_day_and_forget_the_old_ones() {
    let now = 1_795_996_800 + 3600; // an hour into a day
    let mut d = Daily::default();
    d.add("a", now - 60, 60.0, 0.0);
    d.add("a", now, 30.0, 30.0);
    d.add("a", now - 86_400, 100.0, 1.0);
    d.add("a", now - 40 * 86_400, 100.0, 100.0);
    let v = d.version;
    d.trim(now);
    let cells = d.cells("a", now);
    assert_eq!(cells[DAYS_SHOWN - 1], Some(1.0 - 30.0 / 90.0), "today");
    assert_eq!(cells[DAYS_SHOWN - 2], Some(0.99), "yesterday");
    assert!(
        cells[..DAYS_SHOWN - 2].iter().all(Option::is_none),
        "40 days ago is gone"
    );
    assert_eq!(d.cells("b", now), [None; DAYS_SHOWN]);
    assert!(v >= 4);
}
